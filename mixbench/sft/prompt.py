"""The instruction prompt shared by fine-tuning and the generate-and-match evaluation.

``alpaca`` is the Stanford Alpaca template that LLM-Adapters (Hu et al., 2023; ``finetune.py``,
``commonsense_evaluate.py``) and so OwLore / Mix-LN use for Commonsense170K::

    Below is an instruction that describes a task. Write a response that appropriately completes the request.

    ### Instruction:
    {instruction}

    ### Response:
    {output}

(with an ``### Input:`` section and the "paired with an input" preamble when ``input`` is not empty).  LLM-Adapters'
source writes the template as an indented triple-quoted f-string, so its prompts carry 16 spaces before each
section (and ``finetune.py`` a stray ``# noqa: E501`` after the first sentence, absent at evaluation); we use the
template without those artefacts, identically for training and evaluation.
"""

from __future__ import annotations

from ..core.errors import ConfigError

PROMPT_TEMPLATES = {
    "alpaca": (
        "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Response:\n"
    ),
    "alpaca_input": (
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    ),
}
TEMPLATE_NAMES = ("alpaca",)


def build_prompt(instruction: str, input: str | None = None, template: str = "alpaca") -> str:
    """The prompt up to and including ``### Response:\\n``; the response (``output``) follows it directly."""
    if template not in TEMPLATE_NAMES:
        raise ConfigError(f"unknown prompt template {template!r}; valid: {', '.join(TEMPLATE_NAMES)}")
    if input:
        return PROMPT_TEMPLATES["alpaca_input"].format(instruction=instruction, input=input)
    return PROMPT_TEMPLATES["alpaca"].format(instruction=instruction)
