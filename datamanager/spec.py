"""The ``data`` section of a job spec: where the data lies, how it is batched, what it must meet.

Example:
    >>> spec = DataSpec.model_validate({
    ...     "url": "s3://bucket/cifar/train-*.npz", "batch_size": 256,
    ...     "pipeline": "mypkg.data:augment",
    ...     "expectations": [{"expect": "in_set", "column": "y", "values": [0, 1, 2]},
    ...                      {"expect": "between", "column": "x", "min": 0, "max": 1}]})
    >>> spec.resolved_format(), spec.expectations[0].describe()
    ('numpy', 'y in_set [0, 1, 2]')
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["SUFFIX_FORMATS", "DataSpec", "Expectation", "FeatureSpec"]

_FUNCTION_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
SUFFIX_FORMATS = {
    ".npz": "numpy",
    ".npy": "numpy",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".tfrecord.gz": "tfrecord",
    ".tfrecords.gz": "tfrecord",
    ".txt": "text",
    ".txt.gz": "text",
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
}
STREAM_ONLY = ("text", "jsonl")  # records of strings and lists of any length: never staged


def rule_error(rule: str, fix: str) -> PydanticCustomError:
    """The same error as ``ultron.spec.strict.rule_error`` (read back by ``ultron.spec.loader``).

    Defined here, not imported, so that ``ultron.spec`` can import this module: the spec room sits
    above this one.
    """
    return PydanticCustomError("ultron_rule", "{rule}", {"rule": rule, "fix": fix})


class _Strict(BaseModel):
    # allow_inf_nan=False: a float field refuses .inf and .nan (YAML) and Infinity/NaN (JSON),
    # as the rest of the job spec does (ultron.spec.strict.Strict).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class FeatureSpec(_Strict):
    """One feature of a TFRecord file of ``tf.train.Example`` records (TFRecord data only)."""

    dtype: Literal["float32", "int64"] = Field(
        default="float32", description="float32 (a float_list) or int64 (an int64_list)."
    )
    shape: list[int] = Field(
        default_factory=list, description="Shape of one example's value; [] for a scalar."
    )


class Expectation(_Strict):
    """One thing the data must meet, checked by great-expectations before any trial runs.

    ``expect`` is one of: ``columns`` (these columns exist), ``not_null`` (no missing values or
    NaN), ``between`` (``min <= value <= max``; for an array column every element),
    ``in_set`` (a scalar column's values are among ``values``), ``type`` (the column's dtype).
    """

    expect: Literal["columns", "not_null", "between", "in_set", "type"] = Field(
        description="The kind of expectation."
    )
    column: str | None = Field(
        default=None, description="The column it checks (all kinds except columns)."
    )
    columns: list[str] | None = Field(
        default=None, description="columns only: the column names that must exist."
    )
    min: float | None = Field(
        strict=True, default=None, description="between only: the lowest allowed value."
    )
    max: float | None = Field(
        strict=True, default=None, description="between only: the highest allowed value."
    )
    values: list[Any] | None = Field(default=None, description="in_set only: the allowed values.")
    type: str | None = Field(
        default=None, description=f"type only: the dtype, one of {', '.join(_DTYPES)}."
    )

    @field_validator("values")
    @classmethod
    def _finite_values(cls, value: list[Any] | None) -> list[Any] | None:
        for index, item in enumerate(value or ()):
            if isinstance(item, float) and not math.isfinite(item):
                raise rule_error(
                    f"its numbers must be finite (no nan or inf), and values[{index}] is {item}",
                    "remove .nan/.inf from the values (expect: not_null checks for missing "
                    "values), or write a finite number",
                )
        return value

    @model_validator(mode="after")
    def _needs_its_fields(self) -> Expectation:
        if self.expect == "columns":
            if not self.columns:
                raise rule_error("expect: columns needs a list of columns", "add columns: [x, y]")
            return self
        if not self.column:
            raise rule_error(f"expect: {self.expect} needs a column", "add column: <name>")
        if self.expect == "between" and self.min is None and self.max is None:
            raise rule_error("expect: between needs min, max or both", "add min: and/or max:")
        if self.expect == "in_set" and not self.values:
            raise rule_error("expect: in_set needs the allowed values", "add values: [0, 1]")
        if self.expect == "type" and self.type not in _DTYPES:
            raise rule_error(
                f"expect: type needs type to be one of {', '.join(_DTYPES)}",
                "write e.g. type: float32",
            )
        return self

    def describe(self) -> str:
        """The expectation in one line, as the error report names it."""
        if self.expect == "columns":
            return f"columns {self.columns}"
        detail = {
            "not_null": "",
            "between": f" [{self.min}, {self.max}]",
            "in_set": f" {self.values}",
            "type": f" {self.type}",
        }[self.expect]
        return f"{self.column} {self.expect}{detail}"


class DataSpec(_Strict):
    """Where the job's data lies, how the data service batches it, and what it must meet.

    The data is one file, a folder or a glob, local or in an object store (any fsspec URL:
    ``s3://`` with the ``s3`` extra). NumPy ``.npz`` files hold named arrays of equal length;
    Parquet files hold columns of scalars or fixed-length lists; TFRecord files hold
    ``tf.train.Example`` records described by ``features``.
    """

    url: str = Field(
        min_length=1,
        description="The data: a file, folder or glob; a path relative to the spec, or a URL.",
    )
    format: Literal["auto", "numpy", "parquet", "tfrecord", "text", "jsonl"] = Field(
        default="auto",
        description="The file format; auto reads it from the file suffix. text (a record per "
        "line, column text) and jsonl (a JSON object per line) need placement: stream.",
    )
    features: dict[str, FeatureSpec] = Field(
        default_factory=dict, description="TFRecord only: feature name -> dtype and shape."
    )
    batch_size: int = Field(strict=True, default=32, ge=1, description="Examples per batch.")
    drop_remainder: bool = Field(
        default=False, description="Drop the last batch of an epoch when it is smaller."
    )
    shuffle_buffer: int = Field(
        strict=True,
        default=10_000,
        ge=0,
        description="Examples in the shuffle buffer (shards are shuffled too); 0: no shuffle.",
    )
    pipeline: str | None = Field(
        default=None,
        description="module:function in your code base that adds augmentation to the "
        "dataset; it gets (dataset, hyperparameters=, seed=) and returns a dataset. seed is "
        "the epoch's seed as an int64 scalar tensor, for tf.data and tf.random ops. With "
        "placement stream it gets (batch, hyperparameters=, seed=), a batch being a dict of "
        "columns (arrays, or lists of strings and lists), and returns the batch.",
    )
    placement: Literal["colocated", "service", "stream"] = Field(
        default="colocated",
        description="How trials get their batches. colocated: the data is staged on the job's "
        "machine and each trial process runs a worker of the job's tf.data service and reads "
        "from it in process, on CPU threads next to the training (no RPC, no copy of the "
        "batches; trials on other machines need ULTRON_HOME on a shared file system). "
        "service: the service's own workers (see workers) make the batches and send them to "
        "the trials over gRPC, which leaves the trial's CPU to the training. stream: nothing "
        "is staged and no service runs; each trial reads the files from the store itself, in "
        "its own order, records of strings and lists of any length included (see "
        "stream_cache): for data larger than one machine's disk.",
    )
    workers: int = Field(
        strict=True,
        default=1,
        ge=1,
        description="placement service only: the service's workers; with more than one, "
        "every example still comes once per epoch but the order is no longer reproducible.",
    )
    compression: Literal["none", "auto"] = Field(
        default="none",
        description="placement service only: how batches travel from the workers over gRPC: "
        "none (fastest on one machine or a fast network; images hardly compress) or auto "
        "(snappy). Colocated workers hand batches over in memory, uncompressed.",
    )
    prefetch: int = Field(
        strict=True, default=4, ge=1, description="Batches the trial's training batch queue holds."
    )
    shard_rows: int = Field(
        strict=True,
        default=4096,
        ge=1,
        description="Examples per staged shard (the unit shuffled first).",
    )
    stream_cache: ByteSize = Field(
        default=ByteSize(2 << 30),
        description="placement stream only: bytes of the fetched files kept on the machine's "
        "disk (under ULTRON_HOME) for later epochs and later jobs on the same data, e.g. 2GiB; "
        "the files beyond it are read from the store every epoch; 0: keep none.",
    )
    host: str = Field(
        default="localhost", description="The host name trials use to reach the service."
    )
    port: int = Field(
        strict=True,
        default=0,
        ge=0,
        le=65535,
        description="The dispatcher's port; 0 picks a free one.",
    )
    expectations: list[Expectation] = Field(
        default_factory=list, description="What the data must meet before any trial runs."
    )
    validate_rows: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        description="Validate only the first N examples; none: all of them (placement stream: "
        "the first 100,000).",
    )

    @field_validator("pipeline")
    @classmethod
    def _function_path(cls, value: str | None) -> str | None:
        if value is not None and not _FUNCTION_PATH.match(value):
            raise rule_error("pipeline must be module:function", "write e.g. mypkg.data:augment")
        return value

    @model_validator(mode="after")
    def _strings_are_streamed(self) -> DataSpec:
        fmt = self.resolved_format()
        if fmt in STREAM_ONLY and self.placement != "stream":
            raise rule_error(
                f"format is {fmt}, whose records are strings of any length, but placement is "
                f"{self.placement}, which stages fixed-length records",
                "set placement: stream (each trial reads the files from the store itself)",
            )
        return self

    def rows_to_validate(self) -> int | None:
        """How many examples validation reads (it holds them in memory): ``validate_rows``, or
        with placement stream :data:`STREAM_VALIDATE_ROWS` when it is not set."""
        if self.validate_rows is None and self.placement == "stream":
            return STREAM_VALIDATE_ROWS
        return self.validate_rows

    @model_validator(mode="after")
    def _workers_need_the_service(self) -> DataSpec:
        if self.placement != "service" and self.workers > 1:
            raise rule_error(
                f"workers is {self.workers} but placement is {self.placement}, where each trial "
                "process reads for itself",
                "set placement: service to share the data out over the service's workers, "
                "or drop workers",
            )
        return self

    @model_validator(mode="after")
    def _format_known(self) -> DataSpec:
        fmt = self.resolved_format()
        if fmt is None:
            raise rule_error(
                f"the format of {self.url!r} cannot be told from its suffix",
                "set format: numpy, parquet, tfrecord, text or jsonl",
            )
        if fmt == "tfrecord" and not self.features:
            raise rule_error(
                "TFRecord data needs features", "add features: {x: {dtype: float32, shape: [4]}}"
            )
        return self

    def resolved_format(self) -> str | None:
        """The format, from ``format`` or the URL's suffix; ``None`` when it cannot be told."""
        if self.format != "auto":
            return self.format
        name = self.url.rstrip("/").lower()
        for suffix, fmt in SUFFIX_FORMATS.items():
            if name.endswith(suffix) or name.endswith(suffix + "*"):
                return fmt
        return None


STREAM_VALIDATE_ROWS = 100_000  # records validated when placement is stream and none are set
