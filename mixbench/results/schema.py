"""The record (``record.json``) and the grid manifest (``runs/.grids/*.json``) as schemas, defined once (pydantic), that
every reader validates before it uses one: a field of the wrong type, a number beyond a float's range or a label that
is not text makes the file off-schema, named and skipped with the reason, never a crash of a reading command.  Fields
a reader does not use are free (``extra="allow"``); NaN and ±inf stay valid metrics (a diverged run's loss)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

SCHEMA = "mixbench.result/1"
# interrupted: stopped by Ctrl-C (training/preemption.py); pruned: a search trial its pruner stopped early
STATUSES = ("completed", "diverged", "stalled", "failed", "interrupted", "pruned")


def _float_range(value: int | float) -> int | float:
    try:
        float(value)
    except OverflowError:
        raise ValueError("a number beyond a float's range") from None
    return value


def _count(value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError("an integer beyond 64 bits")
    return value


Number = Annotated[StrictInt | StrictFloat, AfterValidator(_float_range)]  # NaN and ±inf allowed
Count = Annotated[StrictInt, AfterValidator(_count)]
Text = Annotated[StrictStr, Field(max_length=10_000)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ModelInfo(_Open):
    name: Text | None = None
    label: Text | None = None
    num_params: Count | None = None


class NormInfo(_Open):
    label: Text | None = None
    placement: Text | None = None


class PrimaryMetric(_Open):
    name: Text
    higher_is_better: StrictBool
    value: Number | None = None


class Budget(_Open):
    steps: Count | None = None
    total_steps: Count | None = None
    max_steps: Count | None = None
    max_epochs: Count | None = None
    epochs: Count | None = None


class Divergence(_Open):
    reason: Text | None = None
    step: Count | None = None


class Validation(_Open):
    step: Count | None = None
    fraction: Number | None = None
    metrics: dict[str, Number | None] | None = None


class Stop(_Open):
    """A resumable stop (``interrupted`` / ``preempted``): the signal and the step."""

    signal: Text | None = None
    step: Count | None = None


class Record(_Open):
    """One run's ``record.json``."""

    schema_: Literal[SCHEMA] = Field(alias="schema")
    task: Text
    family: Text | None = None
    model: ModelInfo | Text
    norm: NormInfo | Text
    seed: Count | None
    status: Literal[STATUSES]
    metrics: dict[str, Number | None]
    primary_metric: PrimaryMetric
    dataset: dict[str, Any] | Text
    scale: Text | None
    config: dict[str, Any] | None = None
    run_id: Text | None = None
    run_dir: Text | None = None
    started_at: Text | None = None
    finished_at: Text | None = None
    wall_time_s: Number | None = None
    steps: Count | None = None
    budget: Budget | None = None
    error: StrictStr | None = None
    divergence: Divergence | None = None
    learning_floor: dict[str, Number] | None = None
    interrupted: Stop | None = None
    preempted: Stop | None = None
    effective: dict[str, Any] | None = None
    fp8: dict[str, Any] | None = None
    validations: list[Validation] | None = None
    train_loss_history: list[tuple[Number, Number]] | None = None
    warnings: list[Any] | None = None


class ManifestRun(_Open):
    argv: list[Annotated[StrictStr, Field(max_length=10_000)]]
    parent: Text | None = None
    run_dir: Text | None = None
    state: Text | None = None
    status: Text | None = None
    wall_time_s: Number | None = None


class Manifest(_Open):
    """A grid's manifest (``mixbench/grids/manifest.py``)."""

    host: Text | None = None
    pid: Count | None = None
    jobs: Count | None = None
    started_at: Text | None = None
    ended_at: Text | None = None
    runs: list[ManifestRun]


def problem(model: type[BaseModel], data: object) -> str | None:
    """Why ``data`` is off ``model``'s schema (the first error: its field and what was wrong), or None."""
    try:
        model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        if first["type"] == "missing":
            return f"missing field {where}{more}"
        if first["type"] == "literal_error":
            return f"unknown {where} {str(first['input'])[:60]!r} ({first['msg']}){more}"
        return f"{where}: {first['msg']}{more}"
    return None
