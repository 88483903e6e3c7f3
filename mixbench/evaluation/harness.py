"""lm-evaluation-harness model class for mixbench checkpoints (``lm_eval`` registry name ``mixbench``).

:class:`MixbenchLM` implements the harness's three request types on top of :class:`~mixbench.evaluation.scoring.Scorer`
(batched, on the GPU when there is one):

* ``loglikelihood(context, continuation)``: ``log p(continuation | context)`` and whether greedy decoding would
  produce it (the harness's ``TemplateLM`` splits context/continuation tokens; an empty context is the EOS token,
  as the harness's HF model does for tokenizers without BOS);
* ``loglikelihood_rolling(text)``: the harness's disjoint rolling windows of ``max_length`` tokens, summed;
* ``generate_until(context, {until, max_gen_toks})``: greedy decoding, cut at the first stop string.

Python users can pass it to the harness directly::

    lm = MixbenchLM(run="results/runs/.../seed0-...")       # or lm_eval.simple_evaluate(model="mixbench", model_args="run=...")
    lm_eval.simple_evaluate(model=lm, tasks=["arc_easy"])

(the ``lm_eval`` command line cannot load models from other packages: for it, ``mixbench export --format hf``).
"""

from __future__ import annotations

import logging

from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from ..data.tokens import EOS_CANDIDATES, TokenizerSpec, special_id
from ..training.trained import load_trained
from .scoring import Scorer

log = logging.getLogger(__name__)


@register_model("mixbench")
class MixbenchLM(TemplateLM):
    """A mixbench causal LM in the harness.  Give ``run`` (a run folder, ``.safetensors`` or ``.ckpt``; its tokenizer
    is the one it was trained with unless ``tokenizer`` is set) or an already built ``model`` with ``tokenizer``."""

    def __init__(
        self,
        run: str | None = None,
        model=None,
        tokenizer: str | None = None,
        batch_size: int | str = 16,
        device: str | None = None,
        max_length: int | str | None = None,
        max_gen_toks: int | str = 256,
        precision: str = "auto",
        **unused,
    ):
        super().__init__()
        if unused:
            log.warning("MixbenchLM ignores the arguments %s", ", ".join(sorted(unused)))
        if model is None:
            if run is None:
                raise ValueError("MixbenchLM needs run=<run folder> or model=<module> with tokenizer=<name>")

            trained = load_trained(run, tokenizer)
            model, tokenizer = trained.model, trained.tokenizer
        elif tokenizer is None:
            raise ValueError("MixbenchLM(model=...) needs tokenizer= (embedded, a tokenizer.json or a hub name)")
        self.tokenizer_spec = TokenizerSpec(str(tokenizer))
        self.tok = self.tokenizer_spec.load()
        self._eot = special_id(self.tok, EOS_CANDIDATES, "end-of-sequence")
        batch_size = 16 if batch_size in (None, "auto") else int(str(batch_size).split(":")[0])
        self.scorer = Scorer(model, device, batch_size, int(max_length) if max_length else None, precision)
        self._max_gen_toks = int(max_gen_toks)

    # --- what the harness asks of a model ------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def max_length(self) -> int:
        return self.scorer.max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int:
        return self.scorer.batch_size

    @property
    def device(self):
        return self.scorer.device

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer_spec.name.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, left_truncate_len: int | None = None, **kwargs) -> list[int]:
        ids = self.tok.encode(string, add_special_tokens=False).ids
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tok.decode(list(tokens), skip_special_tokens=True)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        answers = self.scorer.loglikelihood([(context, continuation) for _, context, continuation in requests])
        for (key, _, _), answer in zip(requests, answers):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return answers

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owners = [], []
        for i, (text,) in enumerate(tqdm([r.args for r in requests], disable=disable_tqdm, desc="rolling windows")):
            for window in map(
                make_disjoint_window,
                get_rolling_token_windows(
                    token_list=self.tok_encode(text), prefix_token=self.prefix_token_id, max_seq_len=self.max_length, context_len=1
                ),
            ):
                windows.append(window)
                owners.append(i)
        totals = [0.0] * len(requests)
        for owner, (logprob, _) in zip(owners, self.scorer.loglikelihood(windows)):
            totals[owner] += logprob
        for request, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        groups: dict[tuple, list[int]] = {}
        for i, request in enumerate(requests):
            _, kwargs = request.args
            kwargs = dict(kwargs or {})
            if kwargs.get("do_sample") or (kwargs.get("temperature") or 0) > 0:
                log.warning("generate_until: sampling settings %s ignored; mixbench decodes greedily", kwargs)
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            until.append(self.tok_decode([self.eot_token_id]) or "<eos>")
            groups.setdefault((tuple(dict.fromkeys(until)), int(kwargs.get("max_gen_toks", self.max_gen_toks))), []).append(i)
        outputs: list[str] = [""] * len(requests)
        for (until, max_gen), members in groups.items():

            def stop(ids: list[int], until=until) -> bool:
                text = self.tok_decode(ids)
                return any(s and s in text for s in until)

            prompts = [self.tok_encode(requests[i].args[0]) for i in members]
            for i, ids in zip(members, self.scorer.generate(prompts, max_gen, self._eot, stop)):
                text = self.tok_decode(ids)
                for s in until:
                    if s:
                        text = text.split(s)[0]
                outputs[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return outputs
