"""Values shared across data, models and losses."""

IGNORE_INDEX = -100  # label of positions that are not scored (padding, the last position of a padded sequence)
