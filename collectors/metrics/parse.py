"""Parsing Prometheus text and evaluating the name table on it, counters turned into rates. Pure.

Rates are taken as Prometheus takes them: per series, (value now − value before) / (time between the two
scrapes' start), a value that went down counting as a restart from 0, and summed or maxed afterwards. A
series needs two scrapes, so the first scrape of a broker (or a series new since the last one) gives no
rate: the metric is absent, never 0. A metric whose series are all missing, or not finite, is absent from
the values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from collectors.metrics.errors import ExpositionError
from collectors.metrics.names import Exposition, LabelSet, MetricRule, parse_selector


def parse_exposition(text: str, wanted: Iterable[str] | None = None) -> dict[str, dict[LabelSet, float]]:
    """Parse Prometheus text with prometheus_client's parser, keeping the samples named in ``wanted``
    (all when None). Raises :class:`ExpositionError` for text that is not the format, or has no sample.

    The parser renames a counter's samples to ``<family>_total`` when the ``# TYPE`` line lacks the
    suffix, as jmx_exporter 0.x writes its ``_count`` counters (``..._count`` becomes ``..._count_total``),
    so each such sample is also found under its family's name. Trailing commas in label sets
    (``{topic="orders",}``, jmx_exporter 0.x) parse as they are. A series given twice keeps its first value.
    """
    keep = None if wanted is None else frozenset(wanted)
    exact: dict[str, dict[LabelSet, float]] = {}
    aliased: dict[str, dict[LabelSet, float]] = {}
    samples = 0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples += 1
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                labels: LabelSet = tuple(sorted(sample.labels.items()))
                if keep is None or sample.name in keep:
                    exact.setdefault(sample.name, {}).setdefault(labels, value)
                alias = family.name
                if (
                    family.type == "counter"
                    and sample.name == f"{alias}_total"
                    and (keep is None or alias in keep)
                ):
                    aliased.setdefault(alias, {}).setdefault(labels, value)
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad input
        raise ExpositionError(f"not Prometheus text format: {type(exc).__name__}: {exc}") from None
    if samples == 0:
        raise ExpositionError("no samples in the response")
    return {**aliased, **exact}


MAX_PROBLEMS = 20
"""Malformed lines reported one by one per scrape; beyond, a count."""


def read_exposition(
    text: str, wanted: Iterable[str] | None = None
) -> tuple[dict[str, dict[LabelSet, float]], tuple[str, ...]]:
    """:func:`parse_exposition`, except that malformed lines among good ones are reported and skipped:
    (the samples of the good lines, one sentence per skipped line). prometheus_client's parser gives up
    on the whole text at the first bad line, and one exporter rule that writes a bad label (or a bad value)
    would then cost the broker every metric; so a text the parser refuses is read again line by line, each
    sample with its family's ``# TYPE`` line. Text with no good sample at all (an HTML error page) is still
    :class:`ExpositionError`."""
    if wanted is not None:
        fast = _fast_read(text, frozenset(wanted))
        if fast is not None:
            return fast
    try:
        return parse_exposition(text, wanted), ()
    except ExpositionError as whole:
        kept, skipped, good = _line_by_line(text, None if wanted is None else frozenset(wanted))
        if not good:
            raise whole from None
        return kept, skipped


_SAMPLE_LINE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^{}\n]*)\})?[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*"
)
_LABEL_PAIR = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_TYPE_LINE = "\n# TYPE "


def _fast_read(
    text: str, wanted: frozenset[str]
) -> tuple[dict[str, dict[LabelSet, float]], tuple[str, ...]] | None:
    """The wanted samples of ``text`` without prometheus_client's parser (about 20 µs a line), which a
    scrape of 1,000 brokers with their partitions' series cannot afford: a family (a ``# TYPE`` line and the
    lines up to the next) whose name no wanted name starts with, and whose lines all start with its name,
    is skipped unread; the wanted lines are read with a regular expression, and a line it does not read
    goes to prometheus_client alone (as :func:`read_exposition` reads a malformed text). Same values as
    :func:`parse_exposition`, including the ``_total`` renaming of counters; a malformed line of a family
    not read is not looked at, so not reported. None when nothing wanted was found (the caller then
    reads the text the slow way, for its error or its empty result)."""
    exact: dict[str, dict[LabelSet, float]] = {}
    aliased: dict[str, dict[LabelSet, float]] = {}
    skipped: list[str] = []
    good = 0
    chunks = text.split(_TYPE_LINE)
    first = chunks[0]
    line_number = 1
    if first.startswith("# TYPE "):
        chunks[0] = first[len("# TYPE ") :]
        start = 0
    else:
        start = 1
        number = _read_block(None, None, "untyped", first, line_number, wanted, exact, aliased, skipped)
        if number is None:
            return None
        good += number
        line_number += first.count("\n") + 1
    relevant: dict[str, bool] = {}
    for chunk in chunks[start:]:
        header, _, body = chunk.partition("\n")
        parts = header.split()
        if len(parts) != 2:
            return None
        family, kind = parts
        base = family[:-6] if kind == "counter" and family.endswith("_total") else family
        wanted_here = relevant.get(base)
        if wanted_here is None:
            wanted_here = relevant[base] = any(w.startswith(base) for w in wanted)
        if not wanted_here:  # skip it if every line is a comment or starts with the family's name
            breaks = body.count("\n")
            named = body.count("\n" + base) + body.startswith(base)
            comments = body.count("\n#") + body.startswith("#")
            if named + comments + (not body or body.endswith("\n")) == breaks + 1:
                line_number += breaks + 2
                continue
        number = _read_block(family, base, kind, body, line_number + 1, wanted, exact, aliased, skipped)
        if number is None:
            return None
        good += number
        line_number += body.count("\n") + 2
    if good == 0:
        return None
    if len(skipped) > MAX_PROBLEMS:
        skipped[MAX_PROBLEMS:] = [f"and {len(skipped) - MAX_PROBLEMS} more malformed lines skipped"]
    return {**aliased, **exact}, tuple(skipped)


def _read_block(
    family: str | None,
    base: str | None,
    kind: str,
    body: str,
    first_line: int,
    wanted: frozenset[str],
    exact: dict[str, dict[LabelSet, float]],
    aliased: dict[str, dict[LabelSet, float]],
    skipped: list[str],
) -> int | None:
    """Read one family's lines into ``exact``/``aliased``; the wanted samples read (good or not finite).

    As prometheus_client reads a counter ``# TYPE F counter``: a sample named ``F`` is renamed
    ``<base>_total`` (``base``: ``F`` without ``_total``) and also found under ``base``; any other name
    is a family of its own, read as it is."""
    counter = kind == "counter" and family is not None
    total_name = f"{base}_total"
    alias = counter and base in wanted
    good = 0
    for offset, raw in enumerate(body.split("\n")):
        line = raw
        if not line or line[0] == "#":
            continue
        if line[0] in " \t\r":
            line = line.strip()
            if not line or line[0] == "#":
                continue
        brace, space = line.find("{"), line.find(" ")
        name = line[:brace] if brace > 0 and (space < 0 or brace < space) else line[:space]
        as_alias = False
        if counter and name == family:
            name, as_alias = total_name, alias
        if name not in wanted and not as_alias:
            continue
        sample = _read_line(line)
        if sample is None:
            if base is None:
                return None  # samples without a family: leave them to prometheus_client
            header = f"# TYPE {family} {kind}\n"
            try:
                parsed = parse_exposition(f"{header}{line}\n", wanted)
            except ExpositionError as exc:
                shown = line if len(line) <= 120 else line[:117] + "..."
                reason = str(exc).removeprefix("not Prometheus text format: ")
                skipped.append(f"line {first_line + offset} skipped ({reason}): {shown}")
                continue
            good += 1
            for parsed_name, series in parsed.items():
                target = aliased if as_alias and parsed_name == base else exact
                for labels, value in series.items():
                    target.setdefault(parsed_name, {}).setdefault(labels, value)
            continue
        good += 1
        labels, value = sample
        if not math.isfinite(value):
            continue
        if name in wanted:
            exact.setdefault(name, {}).setdefault(labels, value)
        if as_alias:
            aliased.setdefault(base or "", {}).setdefault(labels, value)
    return good


def _read_line(line: str) -> tuple[LabelSet, float] | None:
    """(labels, value) of a plain sample line; None for anything the regular expressions do not read."""
    whole = _SAMPLE_LINE.fullmatch(line)
    if whole is None:
        return None
    try:
        value = float(whole[3])
    except ValueError:
        return None
    body = whole[2]
    if not body or body.isspace():
        return (), value
    pairs = []
    pos, end = 0, len(body.rstrip())
    while pos < end:
        pair = _LABEL_PAIR.match(body, pos)
        if pair is None:
            return None
        label = pair[2]
        pairs.append((pair[1], _unescape_label(label) if "\\" in label else label))
        pos = pair.end()
    pairs.sort()
    return tuple(pairs), value


def _unescape_label(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _line_by_line(
    text: str, wanted: frozenset[str] | None
) -> tuple[dict[str, dict[LabelSet, float]], tuple[str, ...], int]:
    """(the wanted samples, the skipped lines, how many sample lines parsed)."""
    kept: dict[str, dict[LabelSet, float]] = {}
    skipped: list[str] = []
    good = 0
    type_line: tuple[str, str] | None = None  # (family, its "# TYPE" line)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            parts = stripped.split()
            if len(parts) >= 3 and parts[1] == "TYPE":
                type_line = (parts[2], stripped)
            continue
        chunks = [f"{line}\n"]
        if type_line is not None and stripped.startswith(type_line[0]):
            chunks.insert(0, f"{type_line[1]}\n{line}\n")
        for chunk in chunks:
            try:
                parsed = parse_exposition(chunk, wanted)
            except ExpositionError as exc:
                reason = str(exc)
                continue
            good += 1
            for name, series in parsed.items():
                for labels, value in series.items():
                    kept.setdefault(name, {}).setdefault(labels, value)
            break
        else:
            shown = stripped if len(stripped) <= 120 else stripped[:117] + "..."
            skipped.append(
                f"line {number} skipped ({reason.removeprefix('not Prometheus text format: ')}): {shown}"
            )
    if len(skipped) > MAX_PROBLEMS:
        skipped[MAX_PROBLEMS:] = [f"and {len(skipped) - MAX_PROBLEMS} more malformed lines skipped"]
    return kept, tuple(skipped), good


def selectors_of(table: Mapping[str, MetricRule]) -> frozenset[str]:
    """The sample names the table reads."""
    texts = [t for rule in table.values() for t in (*rule.selectors, rule.minus) if t is not None]
    return frozenset(parse_selector(t).name for t in texts)


@dataclass(frozen=True, slots=True)
class CounterState:
    """The counter series one scrape saw, kept for the next scrape's rates."""

    at: float
    """When the scrape started (epoch seconds): Prometheus's sample timestamp."""
    series: Mapping[str, Mapping[LabelSet, float]] = field(default_factory=dict)
    """Selector text -> the series it selected."""


def evaluate(
    table: Mapping[str, MetricRule], exposition: Exposition, at: float, previous: CounterState | None = None
) -> tuple[dict[str, float], CounterState]:
    """The table's metrics from one exposition taken at ``at``, rates against ``previous``; returns them
    with the counters to keep for next time."""
    counters: dict[str, Mapping[LabelSet, float]] = {}
    values: dict[str, float] = {}
    for name, rule in table.items():
        value = _term(rule, _chosen(rule, exposition), exposition, at, previous, counters)
        if value is not None and rule.minus is not None:
            minus = _term(rule, rule.minus, exposition, at, previous, counters)
            value = None if minus is None else value - minus
        if value is not None and math.isfinite(value):
            values[name] = value
    return values, CounterState(at, counters)


def _chosen(rule: MetricRule, exposition: Exposition) -> str:
    """The rule's first selector that selects a series (``series`` when none does)."""
    if rule.fallbacks:
        for selector in rule.selectors:
            if parse_selector(selector).select(exposition):
                return selector
    return rule.series


def _term(
    rule: MetricRule,
    text: str,
    exposition: Exposition,
    at: float,
    previous: CounterState | None,
    counters: dict[str, Mapping[LabelSet, float]],
) -> float | None:
    selected = parse_selector(text).select(exposition)
    if rule.rate:
        counters[text] = selected
        before = None if previous is None else previous.series.get(text)
        selected = rates(selected, before, at - previous.at if previous is not None else 0.0)
    if not selected:
        return None
    return sum(selected.values()) if rule.aggregate == "sum" else max(selected.values())


def rates(
    now: Mapping[LabelSet, float], before: Mapping[LabelSet, float] | None, elapsed_s: float
) -> dict[LabelSet, float]:
    """Per-second increase of each series seen both times; a value that went down restarted from 0."""
    if before is None or elapsed_s <= 0:
        return {}
    result = {}
    for labels, value in now.items():
        if labels in before:
            increase = value - before[labels] if value >= before[labels] else value
            result[labels] = increase / elapsed_s
    return result
