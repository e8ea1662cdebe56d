"""Acceptance rules as specs: one small frozen spec per rule, owning its whole lifecycle.

A ``DecodingMethod`` (``gsd_lab.decode.methods``) names its acceptance rule by one spec:

- ``SDAcceptance()``: speculative sampling, min(1, p(x)/q(x)) (SJD; AR verifies nothing);
- ``ClusterAcceptance(clusters="dynamic", group_size=25)``: GSD's clusters, G tokens;
- ``AmplifyAcceptance(scale, inner)``: min(1, k p(C)/q(C)) around SD or clusters;
- ``LanternAcceptance(k, delta)``: LANTERN's neighbourhoods of k tokens, budget delta;
- ``RelaxationAcceptance(delta)``: the TV-optimal relaxation (``gsd_core.OptimalRelaxation``);
- ``TransportAcceptance(eps, k)``: the transport relaxation, a W1 budget eps per token;
- ``BudgetAcceptance(budget, measure, policy, cap, k)``: the certified dial (``decode.budget``).

Each spec checks its fields and its fit to the method (``check``), serialises itself
(``to_dict``, tagged; ``from_dict``), declares its command-line flags (``flags``,
``from_flags``; ``acceptance_from_flags`` reads them all) and builds the gsd_core rule
(``build``); a rule whose targets change per window gives the loop ``windows(resolved)``.
Adding a rule: ``register_acceptance`` (docs/methods.md). No torch until a rule is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .choices import (
    BUDGET_MEASURES,
    BUDGET_POLICIES,
    CLUSTER_KINDS,
    FILTER_KINDS,
    PARTITION_KINDS,
    RESIDUALS,
)
from .rule_parts import cached, cluster_rule, content_neighbours_of, method_rule

DEFAULT_TRANSPORT_K = 16


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {choices}")


@dataclass(frozen=True)
class Flag:
    """One command-line flag of a spec: ``--name`` (argparse dest: the name with '_'), of
    ``type``, ``default`` and ``choices``; ``from_flags`` reads it by that dest."""

    name: str
    type: Any
    default: Any
    help: str
    choices: tuple | None = None
    field: str | None = None  # the spec's field it sets (``from_flags``); None: the dest

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


class AcceptanceSpec:
    """The base of acceptance specs (frozen dataclasses; module docstring). Subclasses set
    ``name`` (the tag), ``kinds`` (the method kinds they verify) and ``flags``, and override
    ``build``; the other methods have the defaults of a plain rule."""

    name: ClassVar[str] = ""
    kinds: ClassVar[tuple[str, ...]] = ("sjd",)
    flags: ClassVar[tuple[Flag, ...]] = ()
    amplifiable: ClassVar[bool] = False  # AmplifyAcceptance may wrap it

    def check(self, kind: str, residual: str) -> None:
        """Refuse a method this rule cannot verify (kind, residual), naming the problem."""
        if kind not in self.kinds:
            raise ValueError(
                f"acceptance rule {self.name!r} verifies methods {self.kinds}, got {kind!r}"
            )

    @property
    def is_partition(self) -> bool:
        """Whether the rule's clusters partition the vocabulary (the cluster-exact residual)."""
        return False

    @property
    def uses_filters(self) -> bool:
        """Whether the rule reads the method's cluster filters (``FilterSettings``)."""
        return False

    @property
    def uses_transport(self) -> bool:
        """Whether the rule needs the adapter's content neighbours (``code_content()``)."""
        return False

    def to_dict(self) -> dict[str, Any]:
        """{"rule": name, field: value, ...}: JSON-ready, read back by ``from_dict``."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        return {"rule": self.name, **{k: _json(v) for k, v in data.items()}}

    @classmethod
    def from_fields(cls, data: dict[str, Any]) -> "AcceptanceSpec":
        """The spec of ``to_dict``'s fields (without the tag)."""
        return cls(**data)

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> "AcceptanceSpec | None":
        """The spec its flags' ``values`` (by dest) give for method ``kind``, or None when they
        are at their defaults. A bad value raises ``ValueError`` naming the flag."""
        given = {
            f.field or f.dest: values[f.dest] for f in cls.flags if values[f.dest] != f.default
        }
        return cls(**given) if given else None

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        """The gsd_core rule ``verify`` takes for ``adapter`` (``DecodingMethod.resolve``):
        ``cache`` a dict kept per adapter for expensive tables, ``method`` the whole method,
        ``embeddings`` [V, D] the rows that define distances."""
        raise NotImplementedError(f"{type(self).__name__} builds no rule")

    def windows(self, resolved: Any) -> Any:
        """None, or for a rule whose targets change per window one object per decode with
        ``for_window(p, q, forced) -> rule``, ``charge(accepted)`` and ``spent`` (the loop's
        hook; ``resolved``: the ``ResolvedMethod``)."""
        return None


def _json(value: Any) -> Any:
    return value.to_dict() if isinstance(value, AcceptanceSpec) else value


ACCEPTANCES: dict[str, type[AcceptanceSpec]] = {}


def register_acceptance(cls: type[AcceptanceSpec]) -> type[AcceptanceSpec]:
    """Register a spec class under its ``name`` (a decorator): ``from_dict`` reads its tag and
    the command line offers its ``flags``. Refuses a taken name or flag."""
    if not (isinstance(cls, type) and issubclass(cls, AcceptanceSpec)) or not cls.name:
        raise ValueError(f"an acceptance spec is an AcceptanceSpec with a name, got {cls!r}")
    taken = ACCEPTANCES.get(cls.name)
    if taken is not None and taken is not cls:
        raise ValueError(f"acceptance rule {cls.name!r} is taken by {taken.__name__}")
    flags = {f.name for spec in ACCEPTANCES.values() if spec is not cls for f in spec.flags}
    clash = sorted(flags & {f.name for f in cls.flags})
    if clash:
        raise ValueError(f"flags {clash} of {cls.__name__} are taken by another rule")
    ACCEPTANCES[cls.name] = cls
    return cls


def from_dict(data: dict[str, Any]) -> AcceptanceSpec:
    """The spec of a tagged dict ({"rule": name, ...}; ``AcceptanceSpec.to_dict``)."""
    if not isinstance(data, dict) or not isinstance(data.get("rule"), str) or (
        data["rule"] not in ACCEPTANCES
    ):
        names = sorted(ACCEPTANCES)
        raise ValueError(f"an acceptance rule is a dict with 'rule' one of {names}, got {data!r}")
    cls = ACCEPTANCES[data["rule"]]
    try:
        return cls.from_fields({k: v for k, v in data.items() if k != "rule"})
    except (TypeError, KeyError) as error:  # a missing or unknown field
        raise ValueError(f"acceptance rule {data['rule']!r}: bad fields in {data!r} ({error})")


def _replaces_sjd(rule: str, got: str) -> ValueError:
    return ValueError(
        f"{rule} replaces SJD's acceptance test: use method 'sjd' with residual 'token', not "
        f"around clusters, LANTERN or Amplify (got {got})"
    )


def _token_by_token(kind: str, clusters: object, group_size: object) -> ValueError:
    return ValueError(
        f"method {kind!r} verifies token by token: ClusterAcceptance belongs to method 'gsd' "
        f"(got clusters {clusters!r}, group_size {group_size!r})"
    )


def _check_sjd_only(rule: str, kind: str, residual: str) -> None:
    if kind != "sjd" or residual != "token":
        raise _replaces_sjd(rule, f"method {kind!r}, residual {residual!r}")


@register_acceptance
@dataclass(frozen=True)
class SDAcceptance(AcceptanceSpec):
    """Speculative sampling, token by token: accept min(1, p(x)/q(x)) (SJD's test)."""

    name: ClassVar[str] = "sd"
    kinds: ClassVar[tuple[str, ...]] = ("ar", "sjd")
    amplifiable: ClassVar[bool] = True

    def check(self, kind: str, residual: str) -> None:
        if kind == "gsd":
            raise ValueError(
                "method 'gsd' verifies clusters: give acceptance=ClusterAcceptance(...) "
                f"(clusters one of {CLUSTER_KINDS}), or none for GSD's default"
            )

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> None:
        return None  # the default: no flags of its own

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        return method_rule(None, method.residual)


# GSD's defaults (``ClusterAcceptance()``, --method gsd without --group-size / --clusters).
DEFAULT_GROUP_SIZE = 25
DEFAULT_CLUSTERS = "dynamic"
MIN_GSD_GROUP_SIZE = 2


@register_acceptance
@dataclass(frozen=True)
class ClusterAcceptance(AcceptanceSpec):
    """GSD: accept min(1, p(C)/q(C)) for the draft's cluster C, ``clusters`` one of
    ``CLUSTER_KINDS`` with G = ``group_size`` tokens (``resolve``: the gsd_core rule)."""

    clusters: str = DEFAULT_CLUSTERS
    group_size: int = DEFAULT_GROUP_SIZE

    name: ClassVar[str] = "clusters"
    kinds: ClassVar[tuple[str, ...]] = ("gsd",)
    amplifiable: ClassVar[bool] = True
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--group-size",
            int,
            None,
            "GSD group size G >= 2 (default 25; --method gsd only: tokens per cluster; "
            "G = 1 would be SJD)",
        ),
        Flag(
            "--clusters",
            str,
            None,
            "GSD clusters: the paper's dynamic rule with filters (default) or our rank-binned "
            "partition (--method gsd only)",
            ("dynamic", "rank-binned"),
        ),
    )

    def __post_init__(self) -> None:
        choice("clusters", self.clusters, CLUSTER_KINDS)
        if not (_is_int(self.group_size) and self.group_size >= 1):
            raise ValueError(
                "group_size (G, tokens per cluster) must "
                f"be an int >= 1, got {self.group_size!r}"
            )

    def check(self, kind: str, residual: str) -> None:
        if kind != "gsd":
            raise _token_by_token(kind, self.clusters, self.group_size)

    @property
    def is_partition(self) -> bool:
        return self.clusters in PARTITION_KINDS

    @property
    def uses_filters(self) -> bool:
        return self.clusters in FILTER_KINDS

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> "ClusterAcceptance | None":
        size, clusters = values["group_size"], values["clusters"]
        if size is not None and size < MIN_GSD_GROUP_SIZE:
            raise ValueError(
                f"--group-size must be >= {MIN_GSD_GROUP_SIZE}, got {size} (a group size of 1 "
                "makes every cluster a single token: that is SJD, use --method sjd)"
            )
        if kind != "gsd":
            for flag, value in (("--group-size", size), ("--clusters", clusters)):
                if value is not None:
                    raise ValueError(f"{flag} applies to --method gsd only (got --method {kind})")
            return None
        size = DEFAULT_GROUP_SIZE if size is None else size
        return cls(clusters or DEFAULT_CLUSTERS, size)

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        clusters = cluster_rule(self, method, adapter, embeddings, cache)
        return method_rule(clusters, method.residual)


@register_acceptance
@dataclass(frozen=True)
class AmplifyAcceptance(AcceptanceSpec):
    """Amplify: accept min(1, k p(C)/q(C)) around ``inner`` (SD or clusters); k = ``scale``
    > 0, not 1 (1 is the rule itself; k > 1 the lossy "Amplify")."""

    scale: float
    inner: AcceptanceSpec = SDAcceptance()

    name: ClassVar[str] = "amplify"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--amplify",
            float,
            1.0,
            "lossy relaxation: accept with min(1, k p/q), k > 0 (k = 1: exact; not for "
            "--method ar)",
        ),
    )

    def __post_init__(self) -> None:
        if not (_is_number(self.scale) and self.scale > 0):
            raise ValueError(f"Amplify's scale must be a finite number > 0, got {self.scale!r}")
        if self.scale == 1:
            raise ValueError("Amplify's scale 1 is the rule itself: give the rule, not Amplify")
        if not isinstance(self.inner, AcceptanceSpec):
            raise ValueError(f"Amplify wraps an acceptance spec, got {self.inner!r}")
        object.__setattr__(self, "scale", float(self.scale))

    def check(self, kind: str, residual: str) -> None:
        if kind == "ar":
            raise ValueError(
                "Amplify applies to methods 'sjd' and 'gsd' (AR has no acceptance test)"
            )
        if not self.inner.amplifiable:
            raise _replaces_sjd(f"rule {self.inner.name!r}", "it amplified")
        self.inner.check(kind, residual)

    @property
    def is_partition(self) -> bool:
        return self.inner.is_partition

    @property
    def uses_filters(self) -> bool:
        return self.inner.uses_filters

    @classmethod
    def from_fields(cls, data: dict[str, Any]) -> "AmplifyAcceptance":
        return cls(data["scale"], from_dict(data["inner"]))

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> "AmplifyAcceptance | None":
        scale = values["amplify"]
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"--amplify must be a finite number > 0, got {scale}")
        if scale == 1.0:
            return None
        if kind == "ar":
            raise ValueError("--amplify applies to --method sjd or gsd (AR has no acceptance test)")
        return cls(scale)

    def around(self, inner: AcceptanceSpec) -> "AmplifyAcceptance":
        """This amplification of ``inner`` (the command line: --amplify with another rule)."""
        return AmplifyAcceptance(self.scale, inner)

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        from gsd_core import Amplify

        inner = self.inner.build(adapter, cache, method=method, embeddings=embeddings)
        return Amplify(self.scale, inner)


@register_acceptance
@dataclass(frozen=True)
class LanternAcceptance(AcceptanceSpec):
    """LANTERN: credit the mass of the draft's ``k`` nearest tokens within budget ``delta``
    (``gsd_core.Lantern``; neighbourhoods by Euclidean distance between embedding rows)."""

    k: int
    delta: float = 0.0

    name: ClassVar[str] = "lantern"

    def __post_init__(self) -> None:
        if not (_is_int(self.k) and self.k >= 1):
            raise ValueError(
                f"LANTERN's k (tokens per neighbourhood) must be an int >= 1, got {self.k!r}"
            )
        if not (_is_number(self.delta) and 0 <= self.delta <= 1):
            raise ValueError(f"LANTERN's delta must be a number in [0, 1], got {self.delta!r}")
        object.__setattr__(self, "delta", float(self.delta))

    def check(self, kind: str, residual: str) -> None:
        if kind != "sjd" or residual != "token":
            raise ValueError(
                "LANTERN replaces SJD's acceptance test: use method 'sjd' with residual "
                f"'token' (got method {kind!r}, residual {residual!r})"
            )

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        import torch
        from gsd_core import Lantern, latent_neighbourhoods

        table = cached(
            cache,
            ("lantern", self.k),
            lambda: latent_neighbourhoods(embeddings.detach().to(torch.float64), self.k),
        )
        return Lantern(table, self.delta)

    def check_rule(self, lantern: Any) -> None:
        """Refuse a rule given for this spec (``ResolvedMethod(lantern=...)``) that is not a
        ``gsd_core.Lantern`` with its k and delta."""
        from gsd_core import Lantern

        if not isinstance(lantern, Lantern):
            raise ValueError(f"lantern must be a gsd_core.Lantern, got {type(lantern).__name__}")
        hood = lantern.neighbourhoods
        if lantern.delta != self.delta or hood.k != min(self.k, hood.vocab_size):
            raise ValueError(
                f"the Lantern rule (k {hood.k}, delta {lantern.delta}) is not the "
                f"method's (k {self.k}, delta {self.delta})"
            )


@register_acceptance
@dataclass(frozen=True)
class RelaxationAcceptance(AcceptanceSpec):
    """The TV-optimal relaxation: each token's law within ``delta`` in (0, 1] of p in TV
    (``gsd_core.OptimalRelaxation``, proofs/10)."""

    delta: float

    name: ClassVar[str] = "tv-relaxation"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--relaxation-delta",
            float,
            0.0,
            "the TV-optimal relaxation: each token's output within this TV of p (--method sjd; "
            "gsd_core.OptimalRelaxation, proofs/10)",
        ),
    )

    def __post_init__(self) -> None:
        if not (_is_number(self.delta) and 0 < self.delta <= 1):
            raise ValueError(
                f"the relaxation's delta must be a number in (0, 1] (0 is SD), got {self.delta!r}"
            )
        object.__setattr__(self, "delta", float(self.delta))

    def check(self, kind: str, residual: str) -> None:
        _check_sjd_only("the TV-optimal relaxation", kind, residual)

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> "RelaxationAcceptance | None":
        return None if values["relaxation_delta"] == 0 else cls(values["relaxation_delta"])

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        from gsd_core import OptimalRelaxation

        return OptimalRelaxation(self.delta)


def _check_transport_k(k: object) -> None:
    if not (_is_int(k) and k >= 1):
        raise ValueError(f"the transport's k (neighbours per code) must be an int >= 1, got {k!r}")


TRANSPORT_K_FLAG = Flag(
    "--transport-k",
    int,
    DEFAULT_TRANSPORT_K,
    "the transport's neighbours per code (--transport-eps or --budget-measure w1)",
)


@register_acceptance
@dataclass(frozen=True)
class TransportAcceptance(AcceptanceSpec):
    """The transport relaxation: each token's law within W1 ``eps`` >= 0 of p (content units;
    0 is SJD bit for bit), on each code's ``k`` nearest codes by decoded content
    (``gsd_lab.decode.relaxation_w1``, proofs/12)."""

    eps: float
    k: int = DEFAULT_TRANSPORT_K

    name: ClassVar[str] = "transport"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--transport-eps",
            float,
            None,
            "the transport relaxation: each token's output within this W1 of p, in the codes' "
            "content distance (--method sjd; gsd_lab.decode.relaxation_w1, proofs/12)",
        ),
        TRANSPORT_K_FLAG,
    )

    def __post_init__(self) -> None:
        if not (_is_number(self.eps) and self.eps >= 0):
            raise ValueError(
                "the transport's eps (a W1 budget per token) must be a finite number >= 0, "
                f"got {self.eps!r}"
            )
        _check_transport_k(self.k)
        object.__setattr__(self, "eps", float(self.eps))

    def check(self, kind: str, residual: str) -> None:
        _check_sjd_only("the transport relaxation", kind, residual)

    @property
    def uses_transport(self) -> bool:
        return True

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> "TransportAcceptance | None":
        eps, k = values["transport_eps"], values["transport_k"]
        w1_dial = values.get("budget") is not None and values.get("budget_measure") == "w1"
        if eps is None and k != DEFAULT_TRANSPORT_K and not w1_dial:
            raise ValueError("--transport-k applies to --transport-eps or --budget-measure w1")
        return None if eps is None else cls(eps, k)

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        from .relaxation_w1 import TRANSPORT_SOLVER, TransportRelaxation

        neighbours = content_neighbours_of(adapter, self.k)
        return TransportRelaxation(neighbours, self.eps, TRANSPORT_SOLVER)

    def windows(self, resolved: Any) -> Any:
        from .relaxation_w1 import PlannedWindows

        return PlannedWindows(resolved.rule)


@register_acceptance
@dataclass(frozen=True)
class BudgetAcceptance(AcceptanceSpec):
    """The certified dial: a total budget ``budget`` B >= 0 in ``measure`` ("tv", or "w1" in
    content units with ``k`` transport neighbours), spent by ``policy`` with each position's
    spend at most ``cap`` (``gsd_lab.decode.budget``, proofs/11 and 13). Verified as SD with
    the allowances the dial sets per window."""

    budget: float
    measure: str = "tv"
    policy: str = "cap"
    cap: float = 1.0
    k: int = DEFAULT_TRANSPORT_K

    name: ClassVar[str] = "budget"
    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--budget",
            float,
            None,
            "the certified dial: the emitted tokens' distortions sum to at most B on every "
            "path, so the image's law is within B of the model's (--method sjd; proofs/11)",
        ),
        Flag("--budget-measure", str, "tv", "the budget's distance", BUDGET_MEASURES),
        Flag(
            "--budget-policy",
            str,
            "cap",
            "cap: each token may spend min(--budget-cap, what is left); sure: a token spends "
            "TV(p, q), a certain acceptance, when that fits",
            BUDGET_POLICIES,
        ),
        Flag(
            "--budget-cap",
            float,
            1.0,
            "the most one token may spend: in (0, 1] for tv, > 0 (content units) for w1",
        ),
    )

    def __post_init__(self) -> None:
        if not (_is_number(self.budget) and self.budget >= 0):
            raise ValueError(f"budget must be a finite number >= 0, got {self.budget!r}")
        choice("budget measure", self.measure, BUDGET_MEASURES)
        choice("budget policy", self.policy, BUDGET_POLICIES)
        cap = self.cap
        if self.measure == "tv" and not (_is_number(cap) and 0 < cap <= 1):
            raise ValueError(f"the budget's cap (TV) must be a number in (0, 1], got {cap!r}")
        if self.measure == "w1" and not (_is_number(cap) and cap > 0):
            raise ValueError(
                f"the budget's cap (W1, the content distance's units) must be a finite number > 0, "
                f"got {cap!r}"
            )
        _check_transport_k(self.k)
        if self.k != DEFAULT_TRANSPORT_K and self.measure != "w1":
            raise ValueError(
                "the budget's k (transport neighbours) belongs to measure 'w1' (or to "
                "TransportAcceptance)"
            )
        object.__setattr__(self, "budget", float(self.budget))
        object.__setattr__(self, "cap", float(cap))

    def check(self, kind: str, residual: str) -> None:
        _check_sjd_only("the TV-optimal relaxation (a budget)", kind, residual)

    @property
    def uses_transport(self) -> bool:
        return self.measure == "w1"

    @classmethod
    def from_flags(cls, values: dict[str, Any], kind: str) -> "BudgetAcceptance | None":
        if values["budget"] is None:
            for flag in cls.flags[1:]:
                if values[flag.dest] != flag.default:
                    raise ValueError(f"{flag.name} applies to --budget only")
            return None
        k = values["transport_k"] if values["budget_measure"] == "w1" else DEFAULT_TRANSPORT_K
        return cls(
            values["budget"],
            values["budget_measure"],
            values["budget_policy"],
            values["budget_cap"],
            k,
        )

    def build(self, adapter: Any, cache: dict, *, method: Any, embeddings: Any) -> Any:
        from gsd_core import SD

        return SD()  # replaced window by window with the dial's rule (``windows``)

    def windows(self, resolved: Any) -> Any:
        from .budget import BudgetDial
        from .relaxation_w1 import TRANSPORT_SOLVER

        neighbours = resolved.neighbours
        return BudgetDial(
            self.budget,
            self.policy,
            self.cap,
            measure=self.measure,
            neighbours=neighbours,
            solver=TRANSPORT_SOLVER,
        )


# --- The command line ---------------------------------------------------------------------------


def command_line_flags() -> list[Flag]:
    """Every registered spec's flags, in registration order (a flag shared by two rules, such as
    --transport-k, is declared by one)."""
    return [flag for spec in ACCEPTANCES.values() for flag in spec.flags]


def _named(cls: type[AcceptanceSpec], values: dict[str, Any], error: ValueError) -> ValueError:
    """``error`` with the flags of ``cls`` that were given named in front, unless it names one."""
    message = str(error)
    if any(flag.name in message for flag in cls.flags):
        return error
    given = [f"{f.name} {values[f.dest]}" for f in cls.flags if values[f.dest] != f.default]
    return ValueError(f"{', '.join(given) or cls.name}: {message}")


def acceptance_from_flags(values: dict[str, Any], kind: str, residual: str) -> AcceptanceSpec:
    """The acceptance spec of the command line's values (argparse dests, ``command_line_flags``)
    for a method of ``kind`` and ``residual``: each registered spec reads its own flags
    (``from_flags``), a wrapper (``around``, e.g. --amplify) wraps the rule the others give, and
    two rules are refused. A bad value raises ``ValueError`` naming the flag."""
    rules, wrappers = [], []
    for cls in ACCEPTANCES.values():
        try:
            spec = cls.from_flags(values, kind)
            if spec is not None and not hasattr(spec, "around"):
                spec.check(kind, residual if spec.is_partition else "token")
        except ValueError as error:
            raise _named(cls, values, error) from None
        if spec is not None:
            (wrappers if hasattr(spec, "around") else rules).append((cls, spec))
    if len(rules) > 1:
        names = [
            f.name for cls, _ in rules for f in cls.flags if values[f.dest] != f.default
        ]
        raise ValueError(f"{' and '.join(names)} are flags of different acceptance rules: give one")
    rule = rules[0][1] if rules else SDAcceptance()
    for cls, wrapper in wrappers:
        try:
            rule = wrapper.around(rule)
            rule.check(kind, residual if rule.is_partition else "token")
        except ValueError as error:
            raise _named(cls, values, error) from None
    return rule
