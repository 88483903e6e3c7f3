"""RLHF (paper Table 3): KV-cache generation, preference data, the reward model, ReMax, and the tiny CPU chain."""

import pytest
import torch
from _support.downstream import TINY
from _support.paths import DATA, SHARED_DATA

from mixbench.layers import NormSpec, list_placements
from mixbench.models import build_model
from mixbench.rlhf.generation import generate, response_logprobs, top_p_filter


def _spec(placement: str) -> NormSpec:
    if placement == "custom":
        return NormSpec(placement="custom", layers=("post", "pre", "sandwich", "pre"))
    return NormSpec(placement=placement)


def _prompts(vocab: int = 512):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    mask[1, :1] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("placement", [*list_placements(), "pre+qk_norm"])
def test_cached_and_uncached_generation_give_the_same_tokens(placement):
    spec = NormSpec(placement="pre", qk_norm="head") if placement == "pre+qk_norm" else _spec(placement)
    model = build_model("llama_debug", spec, seed=0).eval()
    ids, mask = _prompts()
    for greedy in (True, False):
        runs = [
            generate(
                model,
                ids,
                mask,
                10,
                eos_id=2,
                pad_id=0,
                greedy=greedy,
                top_p=0.9,
                generator=torch.Generator().manual_seed(1),
                use_cache=cached,
            )
            for cached in (True, False)
        ]
        assert torch.equal(runs[0].tokens, runs[1].tokens) and torch.equal(runs[0].mask, runs[1].mask)
    assert runs[0].tokens.shape == (3, 10)


@pytest.mark.parametrize("placement", ["pre", "post", "mix"])
def test_masked_forward_of_an_unpadded_row_is_the_training_forward(placement):
    """The training forward is untouched: the generation path computes the same logits on a row without padding."""
    model = build_model("llama_debug", placement, seed=0).eval()
    ids, mask = _prompts()
    with torch.no_grad():
        assert torch.allclose(model(ids[2:]), model.head(model.forward_masked(ids[2:], mask[2:])), atol=1e-5)
        # a left-padded row gives its real tokens the logits of the same row without the padding
        assert torch.allclose(model(ids[:1, 3:]), model.head(model.forward_masked(ids[:1], mask[:1]))[:, 3:], atol=1e-5)


def test_responses_stop_at_eos_and_log_probs_match_the_decoder():
    model = build_model("llama_debug", "pre", seed=0).eval()
    ids, mask = _prompts()
    with torch.no_grad():  # make EOS (id 2) likely so that rows end early
        model.head.weight[2] += 0.5 * model.head.weight.std() * torch.randn(model.cfg.hidden_size).sign()
    out = generate(model, ids, mask, 12, eos_id=2, pad_id=0, greedy=False, generator=torch.Generator().manual_seed(0))
    for row, m in zip(out.tokens, out.mask):
        n = int(m.sum())
        assert (row[: n - 1] != 2).all() and (row[n:] == 0).all()
        assert m[:n].all() and not m[n:].any()
    greedy = generate(model, ids, mask, 6, eos_id=2, pad_id=0, greedy=True)
    logp = response_logprobs(model, ids, mask, greedy)
    with torch.no_grad():  # greedy tokens are the argmax: their log-prob is the max of the distribution at each step
        step0 = torch.log_softmax(model.head(model.forward_masked(ids, mask))[:, -1], -1)
    assert torch.allclose(logp[:, 0], step0.max(-1).values, atol=1e-5)


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(top_p_filter(logits, 0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(top_p_filter(logits, 0.75)).tolist() == [[False, False, True, True]]
    assert torch.isinf(top_p_filter(logits, 0.81)).tolist() == [[False, False, False, True]]
    assert torch.isinf(top_p_filter(logits, 0.1)).tolist() == [[False, True, True, True]]


# --------------------------------------------------------------------------- formulas


def test_bradley_terry_against_hand_computed_values():
    import math

    from mixbench.rlhf.objectives import bradley_terry

    loss, accuracy, margin = bradley_terry(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    assert loss.item() == pytest.approx((math.log(1 + math.exp(-1)) + math.log(1 + math.exp(1))) / 2)
    assert accuracy.item() == 0.5 and margin.item() == 0.0


def test_kl_onestep_returns_and_remax_loss_against_hand_computed_values():
    from mixbench.rlhf.objectives import kl_onestep_returns, remax_loss

    logp = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    reward = torch.tensor([2.0, -1.0])  # already r(sample) − r(greedy), clipped
    g = kl_onestep_returns(logp, ref, mask, reward, kl_ctl=0.1, gamma=0.5)
    # row 0: penalties −0.1·(0.5, −1, 0) and 2 discounted back from the last token: 0.5, 1, 2
    # row 1: penalties −0.1·(1, 0) and −1 discounted: −0.5, −1; nothing after the response
    expected = torch.tensor([[-0.05 + 0.5, 0.1 + 1.0, 0.0 + 2.0], [-0.1 - 0.5, 0.0 - 1.0, 0.0]])
    assert torch.allclose(g, expected)
    loss = remax_loss(logp, g, mask)
    assert loss.item() == pytest.approx(-(expected * logp * mask).sum().item() / 5)
    assert torch.allclose(kl_onestep_returns(logp, ref, mask, reward, 0.1)[0], torch.tensor([1.95, 2.1, 2.0]))  # γ = 1


# --------------------------------------------------------------------------- data

SHARED = SHARED_DATA / "commonsense"


def test_binarized_sample_and_pairs_batches():
    import json

    from mixbench.rlhf.data import EMBEDDED_SAMPLE, PreferenceDataModule, PromptDataModule, synthetic_sample

    assert [json.loads(line) for line in EMBEDDED_SAMPLE.read_text().splitlines()] == synthetic_sample()  # rebuildable

    pairs = PreferenceDataModule(path="embedded", tokenizer="embedded", val_size=8, batch_size=4)
    pairs.setup()
    batch = next(iter(pairs.train_dataloader()))
    assert batch["input_ids"].shape[0] == 8 and len(pairs.train_set) == 40 and len(pairs.val_set) == 8
    for row, last in zip(batch["input_ids"], batch["last"]):
        assert row[last] == pairs.eos_id and (row[last + 1 :] == pairs.pad_id).all()
    text = pairs.tok.decode(batch["input_ids"][0].tolist())
    assert "### Instruction:" in text and "### Response:" in text
    prompts = PromptDataModule(path="embedded", tokenizer="embedded", val_size=8, batch_size=4)
    prompts.setup()
    batch = next(iter(prompts.val_dataloader()))
    assert (batch["prompt_mask"][:, -1] == 1).all() and batch["prompt_ids"].shape == batch["prompt_mask"].shape
    assert all(a.endswith(".") for a in batch["answers"])


def test_stage_shares_are_disjoint_and_cover_the_source():
    from mixbench.sft.data import stage_share

    shares = [set(stage_share(100, "4,3,3", s, 42).tolist()) for s in ("sft", "rm", "rl")]
    assert [len(s) for s in shares] == [40, 30, 30] and set().union(*shares) == set(range(100))
    assert not (shares[0] & shares[1]) and not (shares[1] & shares[2])


@pytest.mark.parametrize(  # sample: records in the shared layout made from the embedded items (tests/_support/data/NOTICE.md)
    "folder",
    [
        DATA / "commonsense",
        pytest.param(SHARED, marks=pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/commonsense is absent")),
    ],
    ids=["sample", "shared"],
)
def test_commonsense_proxy_pairs_name_a_wrong_option(folder):
    from mixbench.core.jsonitems import read_items
    from mixbench.rlhf.data import commonsense_pairs

    records = read_items(folder / "ARC-Challenge" / "train.json")[:50] + read_items(folder / "boolq" / "train.json")[:50]
    assert len(records) >= 12
    for r, p in zip(records, commonsense_pairs(records, "alpaca", 42)):
        assert p.chosen == r["output"] and p.rejected != p.chosen
        wrong = p.rejected.rsplit(" ", 1)[1]
        assert wrong != r["answer"] and wrong in r["instruction"].rsplit("Answer format: ", 1)[1].split("/")
        assert p.prompt.endswith("### Response:\n")


def test_data_errors_name_the_fix(tmp_path):
    from mixbench.core.errors import ConfigError
    from mixbench.rlhf.data import PreferenceDataModule

    bad = tmp_path / "bad.json"
    bad.write_text('[{"instruction": "Q? no options", "input": "", "output": "x", "answer": "y"}, {"instruction": "a", "output": "b"}]')
    with pytest.raises(ConfigError, match="Answer format"):
        PreferenceDataModule(path=str(bad), tokenizer="embedded").setup()
    with pytest.raises(ConfigError, match="three non-negative weights"):
        PreferenceDataModule(path="embedded", tokenizer="embedded", stage_split="1,1").setup()


# --------------------------------------------------------------------------- ReMax with the rule reward


def test_remax_with_the_rule_reward_raises_a_tiny_policys_reward():
    """A bare policy (vocab 16, one-token answers) must learn to answer each prompt with its known answer, a token that
    depends on the prompt's last token: the greedy exact-match reward on fresh prompts starts near chance and must rise
    clearly within 80 ReMax steps."""
    from mixbench.rlhf.lit import ReMaxSettings, RuleReward, remax_step

    torch.manual_seed(0)
    policy = build_model("llama_debug", "mix", seed=0, vocab_size=16, num_layers=2)
    reference = build_model("llama_debug", "mix", seed=0, vocab_size=16, num_layers=2).requires_grad_(False).eval()
    eos = 1
    reward = RuleReward(lambda ids: " ".join(map(str, ids)), eos_id=eos)
    settings = ReMaxSettings(reward="rule", kl_ctl=0.01, max_new_tokens=1, top_p=1.0)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)

    def batch(n, g):
        ids = torch.randint(2, 16, (n, 3), generator=g)
        return {"prompt_ids": ids, "prompt_mask": torch.ones_like(ids), "answers": [str((int(t) + 1) % 14 + 2) for t in ids[:, -1]]}

    def greedy_reward():
        from mixbench.rlhf.generation import generate

        b = batch(64, torch.Generator().manual_seed(99))
        out = generate(policy.eval(), b["prompt_ids"], b["prompt_mask"], 1, eos, 0, greedy=True)
        policy.train()
        return reward(b["prompt_ids"], b["prompt_mask"], out, b["answers"]).mean().item()

    before = greedy_reward()
    STEPS = 80
    g = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        loss, stats = remax_step(policy, reference, reward, batch(64, g), settings, eos, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = greedy_reward()
    assert before < 0.2 and after > 0.6, (before, after)


# --------------------------------------------------------------------------- the chain pretrain → SFT → RM → ReMax

CHAIN = [
    *TINY,
    "norm=mix",
    "norm.alpha=0.5",
    "model.vocab_size=8192",
    "data.path=embedded",
    "data.val_size=4",
    "trainer.max_steps=2",
    "trainer.log_every_n_steps=1",
]
_RM: dict = {}


@pytest.fixture(scope="module")
def rm_run(sft_run, tmp_path_factory):
    if "rm" not in _RM:
        from mixbench.cli.app import main

        results = tmp_path_factory.mktemp("rm")
        assert (
            main(
                [
                    "run",
                    "task=rm_preferences",
                    *CHAIN,
                    f"init_from={sft_run}",
                    "data.batch_size=2",
                    "data.global_batch_size=2",
                    f"results_dir={results}",
                ]
            )
            == 0
        )
        (record,) = results.rglob("record.json")
        _RM["rm"] = record.parent
    return _RM["rm"]


def test_tiny_chain_pretrain_sft_rm_remax_writes_final_reward(sft_run, rm_run, tmp_path):
    import json

    from mixbench.cli.app import main

    rm = json.loads((rm_run / "record.json").read_text())
    assert rm["status"] == "completed" and rm["init_from"]["source"] == str(sft_run)
    assert {"val/accuracy", "val/margin", "val/loss"} <= set(rm["metrics"]) and 0 <= rm["metrics"]["val/accuracy"] <= 100
    assert (
        main(
            [
                "run",
                "task=rlhf_remax",
                *CHAIN,
                f"init_from={sft_run}",
                f"rlhf.reward_model={rm_run}",
                "rlhf.max_new_tokens=6",
                "data.batch_size=2",
                "data.global_batch_size=2",
                f"results_dir={tmp_path}",
            ]
        )
        == 0
    )
    (path,) = tmp_path.rglob("record.json")
    rl = json.loads(path.read_text())
    assert rl["status"] == "completed" and rl["task"] == "rlhf_remax"
    assert rl["init_from"]["source"] == str(sft_run) and rl["reward_model"]["source"] == str(rm_run)
    assert rl["primary_metric"]["name"] == "val/final_reward" and rl["metrics"]["val/final_reward"] == rl["primary_metric"]["value"]
    assert 1 <= rl["metrics"]["val/response_len"] <= 6 and "val/kl" in rl["metrics"] and "val/initial_reward" in rl["metrics"]
    assert 0.0 <= rl["metrics"]["val/answer_match"] <= 100.0 and "val/initial_answer_match" in rl["metrics"]
    from safetensors.torch import load_file

    assert "score.weight" in load_file(str(rm_run / "model.safetensors"))
    assert "score.weight" not in load_file(str(path.parent / "model.safetensors"))


def test_bad_rlhf_input_is_one_line_and_exit_2_before_any_run_folder(sft_run, rm_run, pretrain_run, tmp_path, caplog):
    from mixbench.cli.app import main
    from mixbench.data import ASSETS_DIR

    base = ["run", "task=rlhf_remax", *CHAIN, f"results_dir={tmp_path}"]
    cases = [
        ([f"init_from={rm_run}", f"rlhf.reward_model={rm_run}"], "is a reward-model run"),
        ([f"init_from={sft_run}"], "needs rlhf.reward_model="),
        ([f"init_from={sft_run}", f"rlhf.reward_model={tmp_path / 'nope'}"], "no such run folder"),
        ([f"init_from={sft_run}", f"rlhf.reward_model={sft_run}"], "is not a reward model"),
        (
            [f"init_from={sft_run}", f"rlhf.reward_model={rm_run}", f"data.tokenizer={ASSETS_DIR / 'tokenizer.json'}"],
            "differs from the reward model's",
        ),
        ([f"init_from={sft_run}", "rlhf.reward=rule", "rlhf.max_new_tokens=3000"], "exceeds model.max_seq_len"),
        ([f"init_from={sft_run}", "rlhf.reward=rule", "rlhf.top_p=0"], "top_p=0 (in (0, 1])"),
    ]
    for extra, message in cases:
        caplog.clear()
        assert main([*base, *extra]) == 2, message
        assert message in caplog.text
    assert not list(tmp_path.rglob("config.yaml"))


def test_reproduce_table3_dry_run_lists_four_stages_per_placement(capsys, local_data, tmp_path):
    from mixbench.cli.app import main

    (tmp_path / "commonsense.json").write_text("[]")
    data = [
        f"pretrain:data.path={local_data.text}",
        "pretrain:data.tokenizer=embedded",
        *(f"{stage}:data.path={tmp_path / 'commonsense.json'}" for stage in ("sft", "rm", "rl")),
    ]
    assert main(["reproduce", "table3", "--scale", "proxy", "--seeds", "2", "--dry-run", *data]) == 0
    out = capsys.readouterr().out
    for stage in ("[pretrain]", "[sft]", "[rm]", "[rl]"):
        assert sum(line.startswith(stage) for line in out.splitlines()) == 6  # pre, post, mix × 2 seeds
    assert "task=rlhf_remax" in out and "'rlhf.reward_model=<rm run>'" in out and "norm=post" in out
    assert main(["reproduce", "table3", "--dry-run"]) == 2  # listed, then no data here: exit 2 (test_dry_run_plan.py)
    assert sum(line.startswith("[rl]") for line in capsys.readouterr().out.splitlines()) == 2  # the paper's Pre-LN and Mix-LN


def test_table3_renders_final_reward_remax_gain_rm_accuracy_and_the_paper(sft_run, rm_run, tmp_path):
    import json

    from mixbench.grids.rlhf import paper_numbers, rlhf_table

    rm = json.loads((rm_run / "record.json").read_text())
    base = {
        "task": "rlhf_remax",
        "status": "completed",
        "model": {"name": "llama_1b", "options": {}},
        "scale": "paper",
        "primary_metric": {"name": "val/final_reward"},
        "reward_model": {"source": str(rm_run)},
        "started_at": "2026",
    }
    rewards = {"pre": ((0.7, 0.2), (0.8, 0.4)), "mix(α=0.25)": ((1.3, 0.5), (1.4, 0.5))}  # per seed (final, before)
    records = [
        {**base, "seed": s, "norm": {"label": label}, "metrics": {"val/final_reward": final, "val/initial_reward": before}}
        for label, pairs in rewards.items()
        for s, (final, before) in enumerate(pairs)
    ]
    text = rlhf_table(records, paper_numbers("table3"))
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in text.splitlines()[2:]}
    pre, mix = rows["| llama_1b · pre · paper"], rows["| llama_1b · mix(α=0.25) · paper"]
    assert pre[0] == "0.750 ± 0.071 (n=2)" and pre[-1] == "0.75 |" and pre[1] == "–"
    assert pre[2] == "0.300 ± 0.141 (n=2)"  # the reward before ReMax
    assert pre[3] == "0.450 ± 0.071 (n=2)"  # the gains 0.5 and 0.4, each within its chain
    assert mix[1].startswith("+0.600 [") and mix[-1] == "1.32 |" and mix[-2] == f"{rm['metrics']['val/accuracy']:.1f} (n=1)"
    assert mix[3] == "0.850 ± 0.071 (n=2)" and mix[4].startswith("+0.400 [")  # gains 0.8, 0.9 against 0.5, 0.4


def test_sft_reads_ultrafeedback_binarized_chosen_responses():
    from mixbench.sft.data import InstructionDataModule

    sft = InstructionDataModule(path="embedded", format="binarized", tokenizer="embedded", val_size=4, stage_split="4,3,3")
    sft.setup()
    assert len(sft.train_set) + len(sft.val_set) == 19  # the sft share (40 %) of the 48 pairs
    ids, labels = sft.train_set.items[0]
    scored = sft.tokenizer.load().decode([int(t) for t in labels if t >= 0])
    assert scored.endswith(".") and ("larger than" in scored or " is " in scored)


def test_binarized_pairs_from_local_parquet(tmp_path):
    import datasets

    from mixbench.rlhf.data import binarized_pairs, synthetic_sample

    datasets.Dataset.from_list(synthetic_sample(6)).to_parquet(str(tmp_path / "train_prefs-00000-of-00001.parquet"))
    pairs = binarized_pairs(str(tmp_path / "*.parquet"), "train_prefs", "alpaca")
    assert len(pairs) == 6 and pairs[0].chosen == "12 is larger than 3." and pairs[0].rejected == "3 is larger than 12."
    assert "### Instruction:\nWhich number is larger, 3 or 12?" in pairs[0].prompt


def test_remax_task_with_the_rule_reward_needs_no_reward_model(sft_run, tmp_path):
    import json

    from mixbench.cli.app import main

    assert (
        main(
            [
                "run",
                "task=rlhf_remax",
                *CHAIN,
                f"init_from={sft_run}",
                "rlhf.reward=rule",
                "rlhf.max_new_tokens=4",
                "data.batch_size=2",
                "data.global_batch_size=2",
                f"results_dir={tmp_path}",
            ]
        )
        == 0
    )
    (path,) = tmp_path.rglob("record.json")
    record = json.loads(path.read_text())
    assert record["status"] == "completed" and record["reward"].startswith("rule") and "reward_model" not in record
    metrics = record["metrics"]
    assert 0.0 <= metrics["val/final_reward"] <= 1.0
    # the rule reward is the answer match: the same samples, as a fraction and as a percentage
    assert metrics["val/answer_match"] == pytest.approx(100.0 * metrics["val/final_reward"], abs=1e-4)
    assert metrics["val/initial_answer_match"] == pytest.approx(100.0 * metrics["val/initial_reward"], abs=1e-4)


def test_reproduce_table3_runs_a_chain_and_reuses_its_finished_stages(tmp_path, capsys):
    """One proxy chain (Pre-LN, seed 0) at toy size: four runs, the ReMax record names its SFT run and reward model; a dry
    run afterwards reuses all four stages and running again makes no new run."""
    import json

    from mixbench.cli.app import main

    args = [
        "reproduce",
        "table3",
        "--scale",
        "proxy",
        "--seeds",
        "1",
        "--only",
        "norm=pre",
        f"results_dir={tmp_path}",
        *TINY[1:],
        "model.num_layers=2",
        "data.tokenizer=embedded",
        "model.vocab_size=8192",
        "compile=false",
        "trainer.max_steps=2",
        "pretrain:data.path=embedded",
        "pretrain:data.batch_size=4",
        "pretrain:data.global_batch_size=4",
        "pretrain:trainer.val_check_interval=2",
        "pretrain:data.max_val_tokens=2000",
        "sft:data.format=binarized",
        *[
            f"{stage}:{setting}"
            for stage in ("sft", "rm", "rl")
            for setting in ("data.path=embedded", "data.stage_split=4,3,3", "data.val_size=4")
        ],
        "rm:data.batch_size=2",
        "rm:data.global_batch_size=2",
        "rl:data.batch_size=2",
        "rl:data.global_batch_size=2",
        "rl:data.eval_batch_size=4",
        "rl:rlhf.max_new_tokens=4",
    ]
    assert main(args) == 0
    records = {r["task"]: r for r in (json.loads(p.read_text()) for p in tmp_path.rglob("record.json"))}
    assert set(records) == {"c4_llama_71m", "sft_commonsense", "rm_preferences", "rlhf_remax"}
    assert all(r["status"] == "completed" for r in records.values())
    rl, rm, sft = records["rlhf_remax"], records["rm_preferences"], records["sft_commonsense"]
    assert rl["init_from"]["source"] == rm["init_from"]["source"] == sft["run_dir"] and rl["reward_model"]["source"] == rm["run_dir"]
    table = capsys.readouterr().out  # the table of the finished chains
    assert "val/final_reward" in rl["metrics"] and "· pre · proxy | " in table and "| – |" in table
    assert main([*args[:2], "--dry-run", *args[2:]]) == 0
    assert capsys.readouterr().out.count("# reuse") == 4
    assert main(args) == 0
    assert len(list(tmp_path.rglob("record.json"))) == 4


def test_dataset_names_say_which_sources_a_run_read(tmp_path):
    from mixbench.sft.data import data_name

    for folder in ("boolq", "ARC-Easy", "shards"):
        (tmp_path / folder).mkdir()
    for f in ("boolq/train.json", "ARC-Easy/train.json", "commonsense_170k.json", "shards/part-0.json.gz", "shards/part-1.json.gz"):
        (tmp_path / f).write_text("[]")
    assert data_name(f"{tmp_path}/boolq/train.json,{tmp_path}/ARC-Easy/train.json") == "boolq+ARC-Easy"  # not "train"
    assert data_name(str(tmp_path / "commonsense_170k.json")) == "commonsense_170k"
    assert data_name(str(tmp_path / "shards" / "part-*.json.gz")) == "shards"  # shards of one folder: the folder
    assert data_name("HuggingFaceH4/ultrafeedback_binarized") == "ultrafeedback_binarized"  # a hub name
    assert data_name("allenai/ai2_arc,allenai/openbookqa") == "ai2_arc+openbookqa"
