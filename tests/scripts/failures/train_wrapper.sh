#!/bin/bash
# A shell wrapper, launched as if it were the Python training script.
export OMP_NUM_THREADS=1
exec python train.py "$@"
