"""Downstream evaluation: the batched scorer against brute force, the harness model class, `mixbench eval` offline on
the embedded items (harness and generate-and-match protocols, results in the run's record), the item formats."""

import json
import math
from collections import Counter

import pytest
import torch
from _support.paths import DATA, SHARED_DATA

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.core.jsonitems import read_items
from mixbench.evaluation.formats import TABLE2_TASKS, TASKS, extract_answer, to_harness, to_instruction
from mixbench.evaluation.scoring import Scorer
from mixbench.evaluation.suites import EMBEDDED_DIR, find_task_data

SHARED = SHARED_DATA


def tiny_model(seed: int = 0):
    from mixbench import build_model

    return build_model("llama_debug", "mix", alpha=0.5, seed=seed, num_layers=2, max_seq_len=64).eval()


def test_scorer_matches_full_logits_and_greedy():
    model, g = tiny_model(), torch.Generator().manual_seed(0)
    pairs = [
        (torch.randint(0, 512, (n,), generator=g).tolist(), torch.randint(0, 512, (k,), generator=g).tolist())
        for n, k in ((5, 1), (9, 3), (1, 2), (30, 4), (70, 2))
    ]  # the last one is left-truncated to max_length
    pairs.append((pairs[0][0], pairs[0][1]))  # a duplicate input is run once, scored twice
    scorer = Scorer(model, "cpu", batch_size=2, max_length=64)
    for (context, continuation), (logprob, greedy) in zip(pairs, scorer.loglikelihood(pairs)):
        whole = (context + continuation)[-65:]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([whole[:-1]])).float(), -1)[0]
        positions = range(len(whole) - 1 - len(continuation), len(whole) - 1)
        expected = sum(logp[p, t].item() for p, t in zip(positions, continuation))
        assert math.isclose(logprob, expected, rel_tol=1e-5, abs_tol=1e-4)
        assert greedy == all(logp[p].argmax().item() == t for p, t in zip(positions, continuation))
    # a continuation equal to the greedy one is greedy
    context = pairs[1][0]
    with torch.no_grad():
        best = model(torch.tensor([context]))[0, -1].argmax().item()
    assert scorer.loglikelihood([(context, [best])])[0][1] is True


def test_batched_greedy_generation_equals_one_at_a_time():
    model = tiny_model(1)
    scorer = Scorer(model, "cpu", batch_size=3, max_length=64)
    prompts = [[5, 6, 7], list(range(10, 30)), [42], list(range(100, 111))]
    batched = scorer.generate(prompts, 6)
    for prompt, out in zip(prompts, batched):
        ids = list(prompt)
        for _ in range(6):
            with torch.no_grad():
                ids.append(model(torch.tensor([ids]))[0, -1].argmax().item())
        assert out == ids[len(prompt) :]
    eos = batched[0][2]
    assert scorer.generate(prompts[:1], 6, eos_id=eos) == [batched[0][:2]]
    assert scorer.generate(prompts[:1], 6, stop=lambda ids: len(ids) == 3) == [batched[0][:3]]


def test_embedded_items_cover_table2_in_harness_fields():
    for task in TABLE2_TASKS:
        data = find_task_data(task, ["embedded"])
        assert data.format == "harness" and data.file.parent == EMBEDDED_DIR
        assert len(read_items(data.file)) == (273 if task == "mmlu" else 100)
    assert (EMBEDDED_DIR / "NOTICE.md").is_file()
    with pytest.raises(ConfigError, match="no items of task 'arc_challenge'"):
        find_task_data("arc_challenge", ["embedded"])


def test_answer_extraction_is_llm_adapters():
    assert extract_answer("boolq", " the correct answer is false, not true") == "false"
    assert extract_answer("arc_easy", "answer3 maybe answer1") == "answer3"
    assert extract_answer("winogrande", "no idea") == ""


COMMONSENSE = {"sample": DATA / "commonsense", "shared": SHARED / "commonsense"}


@pytest.mark.parametrize(  # sample: records in the test sets' layout made from the embedded items (tests/_support/data/NOTICE.md)
    "source",
    [
        "sample",
        pytest.param("shared", marks=pytest.mark.skipif(not COMMONSENSE["shared"].is_dir(), reason="../shared/data/commonsense is absent")),
    ],
)
def test_instruction_and_harness_formats_round_trip_on_the_commonsense_test_sets(source):
    folder = COMMONSENSE[source]
    for task in ("boolq", "piqa", "arc_easy", "arc_challenge", "openbookqa", "winogrande", "social_iqa"):
        records = json.loads((folder / TASKS[task].adapters_dir / "test.json").read_text())
        for record in records[:: max(1, len(records) // 200)]:
            back = to_instruction(task, to_harness(task, record))
            assert back["instruction"] == record["instruction"] and back["answer"] == record["answer"], task
        data = find_task_data(task, [str(folder), "embedded"])
        assert data.format == "instruction" and len(data.harness_docs()) == len(records)


def test_mixbench_eval_offline_on_the_embedded_items(sft_run, capsys):
    capsys.readouterr()
    assert main(["eval", "--run", str(sft_run), "--data", "embedded", "--limit", "4", "--batch-size", "8"]) == 0
    table = capsys.readouterr().out
    assert "| mmlu |" in table and "| winogrande |" in table and "average" in table
    record = json.loads((sft_run / "record.json").read_text())
    summary = record["downstream"]["harness"]
    assert set(summary["tasks"]) == set(TABLE2_TASKS) and summary["data"] == ["embedded"]
    per_subject = Counter(d["subject"] for d in read_items(EMBEDDED_DIR / "mmlu.jsonl"))
    for task in TABLE2_TASKS:
        values = summary["tasks"][task]
        assert 0.0 <= values["acc"] <= 1.0 and values["acc_stderr"] is not None
        assert values["n"] == (sum(min(4, n) for n in per_subject.values()) if task == "mmlu" else 4)  # --limit is per (sub)task
        assert record["metrics"][f"eval/{task}/acc"] == values["acc"]
    assert "eval/arc_easy/acc_norm" in record["metrics"] and "eval/boolq/acc_norm" not in record["metrics"]
    assert math.isclose(record["metrics"]["eval/avg/acc"], sum(summary["tasks"][t]["acc"] for t in TABLE2_TASKS) / 7)
    assert record["status"] == "completed" and record["primary_metric"]["name"] == "val/loss"  # the run's own result is untouched
    assert (sft_run / "eval" / "harness.json").is_file()


def test_generate_protocol_and_mixbench_lm_class(pretrain_run):
    from mixbench.evaluation.harness import MixbenchLM
    from mixbench.evaluation.runner import evaluate

    summary = evaluate(str(pretrain_run), ["boolq", "piqa"], protocol="generate", data=["embedded"], limit=3, max_new_tokens=4)
    assert set(summary["tasks"]) == {"boolq", "piqa"} and all(v["n"] == 3 for v in summary["tasks"].values())
    record = json.loads((pretrain_run / "record.json").read_text())
    assert "eval_gen/boolq/acc" in record["metrics"] and record["downstream"]["generate"]["decoding"] == "greedy"

    from lm_eval.api.instance import Instance

    lm = MixbenchLM(run=str(pretrain_run), batch_size="4")
    model, eot = lm.scorer.model, lm.eot_token_id
    with torch.no_grad():  # the values by brute force: full logits of each whole sequence

        def logprobs(ids):
            return model(torch.tensor([ids]))[0].double().log_softmax(-1)

        def scored(context, continuation):  # (sum of the continuation's log-probs, is it the greedy continuation)
            lp = logprobs(context + continuation)[len(context) - 1 : -1]
            return lp[range(len(continuation)), continuation].sum().item(), lp.argmax(-1).tolist() == continuation

        def greedy(prompt, stop, max_new):  # decode until the stop text appears, then cut it off
            ids, generated = lm.tok_encode(prompt), []
            while len(generated) < max_new and stop not in lm.tok_decode(generated):
                token = logprobs(ids + generated)[-1].argmax().item()
                if token == eot:
                    break
                generated.append(token)
            return lm.tok_decode(generated).split(stop)[0], generated

        question = "Question: 1+1?\nAnswer:"
        expected_text, generated = greedy(question, "\n", 5)
        stop = lm.tok_decode(generated[1:2]).strip()  # a stop text that the greedy continuation meets
        expected_cut = greedy(question, stop, 5)[0]
        pairs = [("The sea is", " blue"), ("", "Hello"), (question, expected_text)]  # the last: the greedy continuation
        expected_ll = [
            scored([eot], lm.tok_encode(continuation))
            if not context
            else scored(lm.tok_encode(context), lm.tok_encode(context + continuation)[len(lm.tok_encode(context)) :])
            for context, continuation in pairs
        ]
        expected_rolling = scored([eot], lm.tok_encode("The sea is blue."))[0]
    ll = lm.loglikelihood([Instance("loglikelihood", {}, pair, 0) for pair in pairs])
    assert [g for _, g in ll] == [g for _, g in expected_ll] == [False, False, True]
    assert [lp for lp, _ in ll] == pytest.approx([lp for lp, _ in expected_ll], abs=1e-4)
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("The sea is blue.",), 0)])
    assert rolling == pytest.approx([expected_rolling], abs=1e-4)
    requests = [Instance("generate_until", {}, (question, {"until": [until], "max_gen_toks": 5}), 0) for until in ("\n", stop)]
    out = lm.generate_until(requests)
    assert out == [expected_text, expected_cut] and len(expected_cut) < len(expected_text)


def test_eval_errors_name_the_fix(tmp_path, monkeypatch, pretrain_run):
    from mixbench.evaluation import runner

    with pytest.raises(FileNotFoundError, match="no such run folder"):
        runner.evaluate(str(tmp_path / "nope"), data=["embedded"])
    with pytest.raises(ConfigError, match="no generate-and-match format"):
        runner.evaluate(str(pretrain_run), ["mmlu"], protocol="generate", data=["embedded"])
    monkeypatch.setitem(__import__("sys").modules, "lm_eval", None)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[eval\]'"):
        runner.evaluate(str(pretrain_run), data=["embedded"])
