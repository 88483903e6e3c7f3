"""RLHF as in the Mix-LN paper's Table 3 (zyushun/Adam-mini examples/RLHF, DeepSpeed-Chat with ReMax).

* :mod:`~mixbench.rlhf.data`: preference pairs and prompts (UltraFeedback binarized, the offline commonsense proxy,
  the embedded sample; disjoint stage shares);
* :mod:`~mixbench.rlhf.generation`: sampling / greedy decoding with the LLaMA KV cache, response log-probabilities;
* :mod:`~mixbench.rlhf.objectives`: the Bradley–Terry loss and ReMax's kl_onestep returns and loss;
* :mod:`~mixbench.rlhf.lit`: the reward-model and ReMax LightningModules (tasks ``rm_preferences``, ``rlhf_remax``);
* :mod:`~mixbench.rlhf.checks`: their config-time checks.
"""
