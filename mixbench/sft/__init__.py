"""Supervised fine-tuning on instruction data (Commonsense170K format): the prompt template and the data module.

``task=sft_commonsense`` (``tasks/sft_commonsense``) fine-tunes a pretrained run (``init_from=``) with the
:class:`~mixbench.sft.data.InstructionDataModule`; :mod:`mixbench.evaluation` scores the result.
"""

from .prompt import PROMPT_TEMPLATES, build_prompt

__all__ = ["PROMPT_TEMPLATES", "build_prompt"]
