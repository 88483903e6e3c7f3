"""The downstream sub-commands of ``mixbench``: ``eval`` (lm-evaluation-harness or generate-and-match) and
``export --format hf``.  :func:`add_eval_commands` adds them to the main parser; the work is in
:mod:`mixbench.evaluation` and :mod:`mixbench.export`, imported only when a command runs."""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger("mixbench")


def _tasks(values: list[str] | None) -> list[str] | None:
    return [t for v in values for t in v.split(",") if t] if values else None


def cmd_eval(args: argparse.Namespace) -> int:
    from ..evaluation.runner import evaluate

    summary = evaluate(
        args.run,
        _tasks(args.tasks),
        args.protocol,
        args.data,
        args.num_fewshot,
        args.limit,
        args.batch_size,
        args.device,
        args.max_length,
        args.precision,
        args.max_new_tokens,
        tokenizer=args.tokenizer,
        out=args.out,
        update_record=not args.no_record,
    )
    sys.stdout.write(render_summary(summary))
    return 0


def render_summary(summary: dict) -> str:
    """A Markdown table: task, acc ± stderr, acc_norm ± stderr, n; then the average."""

    def pm(values: dict, metric: str) -> str:
        if metric not in values:
            return "–"
        stderr = values.get(f"{metric}_stderr")
        return f"{100 * values[metric]:.2f}" + (f" ± {100 * stderr:.2f}" if isinstance(stderr, float) and stderr == stderr else "")

    lines = [
        f"{summary['protocol']} protocol, data {' '.join(summary['data'])}, {summary['num_fewshot']}-shot"
        + (f", limit {summary['limit']}" if summary["limit"] else "")
        + f" ({summary['model']['norm_label']}, {summary['model']['source']})",
        "| task | acc (%) | acc_norm (%) | n |",
        "|---|---|---|---|",
    ]
    lines += [f"| {task} | {pm(v, 'acc')} | {pm(v, 'acc_norm')} | {v['n']} |" for task, v in summary["tasks"].items()]
    lines.append(f"| **average** | {100 * summary['average']['acc']:.2f} | | |")
    return "\n".join(lines) + "\n"


def cmd_export(args: argparse.Namespace) -> int:
    from ..export.hf import export_hf

    out = export_hf(args.run, args.out, args.dtype, args.tokenizer)
    sys.stdout.write(f"{out}\n")
    return 0


def add_eval_commands(sub) -> None:
    """Add ``eval`` and ``export`` to the sub-command parsers ``sub`` of ``mixbench``."""
    ev = sub.add_parser(
        "eval",
        help="downstream evaluation of a trained run (lm-evaluation-harness; paper Table 2)",
        description="mixbench eval --run RUN [--tasks mmlu,boolq,...] [--protocol harness|generate] "
        "[--data auto|hub|embedded|DIR ...]; results go into the run's record.json",
    )
    ev.add_argument("--run", required=True, help="a run folder (or its model.safetensors / a .ckpt)")
    ev.add_argument(
        "--tasks",
        nargs="+",
        metavar="TASK",
        help="tasks (space or comma separated); default: the seven of paper Table 2 (generate: without mmlu)",
    )
    ev.add_argument(
        "--protocol",
        choices=("harness", "generate"),
        default="harness",
        help="harness: log-likelihood of each choice (lm-evaluation-harness, the paper); generate: LLM-Adapters' "
        "greedy answer + answer matching on the instruction format",
    )
    ev.add_argument(
        "--data",
        nargs="+",
        default=["auto"],
        metavar="SOURCE",
        help="auto (hub if reachable, else embedded) | hub | embedded | folders with <task>.jsonl or LLM-Adapters "
        "<Task>/test.json, searched in order",
    )
    ev.add_argument("--num-fewshot", type=int, default=0, help="in-context examples (harness protocol); default 0")
    ev.add_argument("--limit", type=int, default=None, help="evaluate only the first N items of each task (tests, smoke runs)")
    ev.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    ev.add_argument("--device", default=None, help="default: cuda when there is a GPU, else cpu")
    ev.add_argument("--max-length", type=int, default=None, help="context window (default: the model's max_seq_len)")
    ev.add_argument(
        "--precision", choices=("auto", "32", "bf16", "16"), default="auto", help="auto: bf16 autocast on a GPU, fp32 on the CPU"
    )
    ev.add_argument("--max-new-tokens", type=int, default=32, help="generate protocol: answer length (LLM-Adapters: 32)")
    ev.add_argument("--tokenizer", default=None, help="default: the tokenizer the run was trained with")
    ev.add_argument("--out", default=None, help="folder for <protocol>.json (default: <run>/eval)")
    ev.add_argument("--no-record", action="store_true", help="do not add the results to the run's record.json")
    ev.set_defaults(func=cmd_eval)
    ex = sub.add_parser(
        "export",
        help="export a trained run (Hugging Face folder with its modelling code)",
        description="mixbench export --format hf RUN [--out DIR]: loads with transformers' "
        "AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True) and lm_eval --model hf",
    )
    ex.add_argument("run", help="a run folder (or its model.safetensors / a .ckpt)")
    ex.add_argument("--format", choices=("hf",), default="hf")
    ex.add_argument("--out", default=None, help="output folder (default: <run>/hf)")
    ex.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    ex.add_argument("--tokenizer", default=None, help="default: the tokenizer the run was trained with")
    ex.set_defaults(func=cmd_export)
