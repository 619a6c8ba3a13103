"""CIFAR-10 for the MXNet CIFAR-10 recipes: the python batch files, index lists, and a torch Dataset.

One module a job; import each name from the module that holds it:

- :mod:`.batches`: the format (SIDE, NUM_CLASSES, CIFAR10_CLASSES, file names) and reading and writing
  CIFAR-10's python batch files and ``batches.meta``, with an unpickler that runs no pickled code.
- :mod:`.synthetic`: a small learnable set in that format (make_synthetic_cifar).
- :mod:`.index`: list lines ``data_batch_1#17 1 6`` and index_cifar (the lists, classes.txt, manifest).
- :mod:`.transforms`: ImageSpec (from a recipe), the training and validation views, normalisation, and
  what each recipe's script does to the images.
- :mod:`.dataset`: CifarImages, the torch Dataset of an index list.
"""
