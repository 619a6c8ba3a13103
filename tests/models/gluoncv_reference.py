"""Runs GluonCV's model ZOO_NAME with seeded random weights on one clip: the oracle of tests/models/
test_import_gluoncv.py. It runs in the GluonCV environment (gluoncv-requirements.txt), not clipflow's.

    python gluoncv_reference.py ZOO_NAME NUM_CLASSES SEED INPUT.npy OUT.params LOGITS.npy [ZOO_NAME ...]

(one model for each six arguments, in one process: MXNet and GluonCV imported once)

Every parameter is drawn from numpy's generator seeded with SEED (sorted by name, so the draw does not hang on
MXNet's order): convolutions and the classifier at He scale, so the activations keep their size through the depth,
BatchNorm's gamma, beta, running mean and running variance away from 1, 0, 0, 1, so a BatchNorm mapped to the wrong
place, or a statistic to the wrong slot, changes the logits. The parameters go to OUT.params with
``save_parameters`` (the model zoo's format); the logits of INPUT.npy (N, 3, T, H, W float32, as the model takes it:
for SlowFast the fast frames then the slow ones) in inference mode (no autograd recording: BatchNorm uses its running
statistics, dropout is off) to LOGITS.npy.
"""

import sys

import mxnet as mx
import numpy as np
from gluoncv.model_zoo import get_model


def random_parameters(net, seed: int) -> None:
    rng = np.random.default_rng(seed)
    params = net.collect_params()
    for name in sorted(params):
        param = params[name]
        shape = param.shape
        if name.endswith("gamma"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("beta"):
            value = rng.normal(0.0, 0.2, shape)
        elif name.endswith("running_mean"):
            value = rng.normal(0.0, 0.2, shape)
        elif name.endswith("running_var"):
            value = rng.uniform(0.5, 2.0, shape)
        elif name.endswith("bias"):
            value = rng.normal(0.0, 0.1, shape)
        else:  # a convolution's or the classifier's weight
            fan_in = int(np.prod(shape[1:]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        param.set_data(mx.nd.array(value.astype(np.float32)))


def main(zoo_name: str, num_classes: str, seed: str, clip: str, params_out: str, logits_out: str) -> None:
    # nclass (GluonCV's name for the number of classes); pretrained_base=False: I3D would fetch ImageNet weights
    net = get_model(zoo_name, pretrained=False, pretrained_base=False, nclass=int(num_classes))
    random_parameters(net, int(seed))
    net.save_parameters(params_out)
    logits = net(mx.nd.array(np.load(clip), dtype="float32"))
    np.save(logits_out, logits.asnumpy())


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 6:
        raise SystemExit(__doc__)
    for at in range(0, len(args), 6):
        main(*args[at : at + 6])
