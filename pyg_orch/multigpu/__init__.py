"""Training on the GPUs of one machine (HyDRA's half of the mission):
topology and hot feature rows sharded across the GPUs and read over peer
access, with DistributedDataParallel and unchanged PyG models."""
