"""One run: compose the config, build data, model and LightningModule, train, evaluate, write one record.

``config`` composes ``configs/`` + task + command line; ``run`` is the run itself; ``lit/`` holds the
LightningModules; the other modules are the run's parts (callbacks, checkpointing, precision, strategy, loggers,
optimizer, status, weights, preemption, the run-folder lock, pre-flight checks).
"""
