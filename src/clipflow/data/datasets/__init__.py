"""A video data set as the user has it, made into the lists the scan reads.

One module a form: a class-per-folder tree (:mod:`.folder`), UCF101 (:mod:`.ucf101`), HMDB51 (:mod:`.hmdb51`),
Something-Something v2 (:mod:`.ssv2`); Kinetics' annotation CSVs are :mod:`clipflow.data.kinetics`. Each reads the
files as they are published and returns one :class:`~clipflow.data.datasets.lists.DatasetLists`, which
:func:`~clipflow.data.datasets.lists.write_dataset` writes as ``train_labels.txt``, ``val_labels.txt`` and
``classes.txt`` for the scan.
"""
