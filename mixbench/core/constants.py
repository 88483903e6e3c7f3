"""Values shared across the package: its version, and values shared by data, models, losses and analyses."""

VERSION = "0.1.0"  # mixbench.__version__; pyproject.toml's version

IGNORE_INDEX = -100  # label of positions that are not scored (padding, the last position of a padded sequence)

ANGULAR_TOKENS = 262_144  # tokens the angular distance between block inputs averages over (the paper's 256K)
