"""The downstream tasks and their two item formats, with exact conversions between them.

* **harness** format: the fields of the Hugging Face dataset that lm-evaluation-harness reads for the task
  (``boolq``: question, passage, label; ``piqa``: goal, sol1, sol2, label; ...), so the harness's own task
  definition (prompt, choices, metrics) applies unchanged;
* **instruction** format: LLM-Adapters' ``dataset/<Task>/test.json`` records ``{"instruction", "input", "output",
  "answer"}`` (the Commonsense170K format), read by the generate-and-match protocol.

``to_harness`` parses an instruction back into the harness fields; ``to_instruction`` writes LLM-Adapters'
templates (separators as in its files).  One loss is unavoidable: LLM-Adapters' BoolQ instructions drop the
passage, so BoolQ converted from them is scored with an empty passage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import ConfigError

LETTERS = "ABCDEFGH"


@dataclass(frozen=True)
class TaskFormat:
    """``harness_yaml``: the harness's task file (under ``lm_eval/tasks``; MMLU: one per subject); ``adapters_dir``:
    LLM-Adapters' dataset folder; ``registry``: the file stem in the shared registry samples; ``answers``: the
    answer pattern of the generate-and-match protocol (LLM-Adapters' ``extract_answer``)."""

    name: str
    harness_yaml: str
    adapters_dir: str | None
    registry: str
    answers: str | None


TASKS = {
    t.name: t
    for t in (
        TaskFormat("mmlu", "mmlu/default/mmlu_{subject}.yaml", None, "mmlu_like", None),
        TaskFormat("boolq", "super_glue/boolq/default.yaml", "boolq", "boolq_like", r"true|false"),
        TaskFormat("arc_easy", "arc/arc_easy.yaml", "ARC-Easy", "arc_like", r"answer1|answer2|answer3|answer4|answer5"),
        TaskFormat("arc_challenge", "arc/arc_challenge.yaml", "ARC-Challenge", "arc_like", r"answer1|answer2|answer3|answer4|answer5"),
        TaskFormat("piqa", "piqa/piqa.yaml", "piqa", "piqa_like", r"solution1|solution2"),
        TaskFormat("hellaswag", "hellaswag/hellaswag.yaml", "hellaswag", "hellaswag_like", r"ending1|ending2|ending3|ending4"),
        TaskFormat("openbookqa", "openbookqa/openbookqa.yaml", "openbookqa", "openbookqa_like", r"answer1|answer2|answer3|answer4|answer5"),
        TaskFormat("winogrande", "winogrande/default.yaml", "winogrande", "winogrande_like", r"option1|option2"),
        TaskFormat("social_iqa", "siqa/siqa.yaml", "social_i_qa", "social_iqa_like", r"answer1|answer2|answer3|answer4|answer5"),
    )
}
TABLE2_TASKS = ("mmlu", "boolq", "arc_easy", "piqa", "hellaswag", "openbookqa", "winogrande")  # paper Table 2, in its order
GENERATE_TASKS = tuple(t for t in TABLE2_TASKS if TASKS[t].answers)  # LLM-Adapters has no MMLU format


def get_task_format(name: str) -> TaskFormat:
    if name not in TASKS:
        raise ConfigError(f"unknown downstream task {name!r}; valid: {', '.join(TASKS)}")
    return TASKS[name]


# --------------------------------------------------------------------------- harness fields → instruction


def _options(word: str, texts: list[str]) -> str:
    return " ".join(f"{word}{i + 1}: {t}" for i, t in enumerate(texts))


def _formats(word: str, n: int) -> str:
    return "/".join(f"{word}{i + 1}" for i in range(n))


def _record(instruction: str, answer: str) -> dict:
    return {"instruction": instruction, "input": "", "output": f"the correct answer is {answer}", "answer": answer}


def to_instruction(task: str, doc: dict) -> dict:
    """An LLM-Adapters record for a harness-format ``doc`` of ``task``."""
    if task == "boolq":
        return _record(
            f"Please answer the following question with true or false, question: {doc['question']}?\n\nAnswer format: true/false",
            "true" if int(doc["label"]) == 1 else "false",
        )
    if task == "piqa":
        return _record(
            f"Please choose the correct solution to the question: {doc['goal']}\n\nSolution1: {doc['sol1']}\n\n"
            f"Solution2: {doc['sol2']}\n\nAnswer format: solution1/solution2",
            f"solution{int(doc['label']) + 1}",
        )
    if task in ("arc_easy", "arc_challenge", "openbookqa"):
        texts, labels = doc["choices"]["text"], doc["choices"]["label"]
        question = doc["question"] if task != "openbookqa" else doc["question_stem"]
        return _record(
            f"Please choose the correct answer to the question: {question}\n\n{_options('Answer', texts)}\n\n"
            f"Answer format: {_formats('answer', len(texts))}",
            f"answer{labels.index(doc['answerKey'].strip()) + 1}",
        )
    if task == "social_iqa":
        texts = [doc["answerA"], doc["answerB"], doc["answerC"]]
        return _record(
            f"Please choose the correct answer to the question: {doc['context']} {doc['question']}\n\n"
            f"{_options('Answer', texts)}\n\nAnswer format: {_formats('answer', 3)}",
            f"answer{int(doc['label'])}",
        )
    if task == "hellaswag":
        endings = doc["endings"]
        return _record(
            f"Please choose the correct ending to complete the given sentence: {doc['activity_label']}: {doc['ctx']}\n\n"
            f"{_options('Ending', endings)}\n\nAnswer format: {_formats('ending', len(endings))}",
            f"ending{int(doc['label']) + 1}",
        )
    if task == "winogrande":
        return _record(
            f"Please choose the correct answer to fill in the blank to complete the given sentence: {doc['sentence']}\n\n"
            f"Option1: {doc['option1']} Option2: {doc['option2']} Answer format: option1/option2",
            f"option{doc['answer']}",
        )
    raise ConfigError(f"task {task!r} has no instruction format (LLM-Adapters covers {', '.join(t for t in TASKS if TASKS[t].answers)})")


# --------------------------------------------------------------------------- instruction → harness fields

_BODY = {
    "boolq": re.compile(r"question: (?P<q>.*)\?\n\nAnswer format: true/false$", re.S),
    "piqa": re.compile(r"question: (?P<q>.*)\n\nSolution1: (?P<a>.*)\n\nSolution2: (?P<b>.*)\n\nAnswer format: solution1/solution2$", re.S),
    "choices": re.compile(r"question: (?P<q>.*)\n\n(?P<opts>Answer1: .*)\n\nAnswer format: (?P<fmt>[a-z0-9/]+)$", re.S),
    "hellaswag": re.compile(r"sentence: (?P<label>.*?): (?P<ctx>.*)\n\n(?P<opts>Ending1: .*)\n\nAnswer format: (?P<fmt>[a-z0-9/]+)$", re.S),
    "winogrande": re.compile(
        r"sentence: (?P<s>.*)\n\nOption1: (?P<a>.*) Option2: (?P<b>.*?)(?:\n\n| )Answer format: option1/option2$", re.S
    ),
}


def _split_options(word: str, text: str, count: int) -> list[str]:
    parts = re.split(rf"(?:^|\s){word}(\d+): ", text)
    numbers, texts = parts[1::2], parts[2::2]
    if numbers != [str(i + 1) for i in range(count)]:
        raise ValueError(f"expected {count} options {word}1..{word}{count}")
    return texts


def to_harness(task: str, record: dict) -> dict:
    """The harness fields of an LLM-Adapters ``record`` of ``task`` (ValueError if it does not parse)."""
    instruction, answer = record["instruction"], record["answer"].strip()
    key = "choices" if task in ("arc_easy", "arc_challenge", "openbookqa", "social_iqa") else task
    if key not in _BODY:
        raise ConfigError(f"task {task!r} has no instruction format")
    m = _BODY[key].search(instruction)
    if m is None:
        raise ValueError("instruction does not match the task's template")
    index = int(re.sub(r"\D", "", answer) or 0) - 1 if task != "boolq" else None
    if task == "boolq":
        return {"question": m["q"], "passage": "", "label": int(answer == "true")}
    if task == "piqa":
        return {"goal": m["q"], "sol1": m["a"], "sol2": m["b"], "label": index}
    if task == "winogrande":
        return {"sentence": m["s"], "option1": m["a"], "option2": m["b"], "answer": str(index + 1)}
    count = len(m["fmt"].split("/"))
    if task == "hellaswag":
        endings = _split_options("Ending", m["opts"], count)
        return {"activity_label": m["label"], "ctx_a": m["ctx"], "ctx_b": "", "ctx": m["ctx"], "endings": endings, "label": str(index)}
    texts = _split_options("Answer", m["opts"], count)
    if not 0 <= index < count:
        raise ValueError(f"answer {answer!r} is not one of the {count} options")
    if task == "social_iqa":
        if count != 3:
            raise ValueError("SocialIQA has 3 options")
        head, dot, tail = m["q"].rpartition(". ")
        context, question = (head + dot.strip(), tail) if dot else m["q"].partition(" ")[::2]
        return {
            "context": context,
            "question": question,
            "answerA": texts[0],
            "answerB": texts[1],
            "answerC": texts[2],
            "label": str(index + 1),
        }
    choices = {"text": texts, "label": list(LETTERS[:count])}
    stem = "question_stem" if task == "openbookqa" else "question"
    return {"id": str(record.get("id", "")), stem: m["q"], "choices": choices, "answerKey": LETTERS[index]}


def extract_answer(task: str, generation: str) -> str:
    """LLM-Adapters' answer extraction: the first match of the task's answer pattern in the generation ('' if none)."""
    pattern = get_task_format(task).answers
    if pattern is None:
        raise ConfigError(f"task {task!r} has no generate-and-match answer format")
    found = re.findall(pattern, generation.strip())
    return found[0] if found else ""
