"""Many runs: sweeps and grids (``runner``, ``launchers``), the paper's grids (``reproduce``, with the
pretrain → SFT → eval chains of ``downstream`` and the → RM → ReMax chains of ``rlhf``) and placement search."""
