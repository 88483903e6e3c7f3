"""The bottom layer: errors, constants, the task and family registries, the model contracts, the project search path.

Everything here imports only the standard library, torch, numpy and OmegaConf, never another mixbench package.
"""
