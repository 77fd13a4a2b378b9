"""NCCL policy: which NCCL variables a run gets, and why. The one place that decides them.

Rules (each decision carries its reason into `plan`, the train log and the manifest):

- NCCL_P2P_DISABLE=1 when any pair of the GPUs the run uses (training and rollout: the weight-sync
  communicator spans both) lacks P2P by NVML (`nvmlDeviceGetP2PStatus`, read capability), or when
  accelerate's RTX 40 check would fire: more than one GPU visible, any of them named "RTX 40...", with a
  driver older than 550.40.07. accelerate then raises NotImplementedError for any job unless both
  NCCL_P2P_DISABLE and NCCL_IB_DISABLE are present, and it lists GPUs through nvidia-smi, which ignores
  CUDA_VISIBLE_DEVICES, so single-GPU jobs on such machines fail too
  (accelerate 1.6.0: state.py:301-308, utils/environment.py:147-172; case C01, tests/cases.md).
  GeForce RTX 4090s have no P2P on stock drivers (NVIDIA developer forum), and older drivers could
  report peer access yet hang (nccl-tests issue #117).
- NCCL_IB_DISABLE=1 when no InfiniBand/RoCE port is ACTIVE under /sys/class/infiniband; NCCL then
  uses sockets. With an active port and accelerate's check firing, NCCL_IB_DISABLE=0 is set so the
  variable is present without turning IB off.
- Several nodes (NNODES > 1): IB stays on where this node has an active port (the start-up node check
  refuses a mix of nodes with and without IB); otherwise NCCL uses sockets. NCCL_SOCKET_IFNAME unset:
  a warning naming the interface NCCL's default would pick (ib*, else any but docker*/lo), refused only
  when that is lo/docker* or several interfaces at once; a name that does not exist is refused (NCCL would
  fall back to whatever interface it finds). GLOO_SOCKET_IFNAME follows it: torch's gloo
  (CPU collectives, the rendezvous store) otherwise binds the address the host name resolves to.
- A value the user set (recipe, command line or environment) is kept, never overwritten. The exception:
  NCCL_P2P_DISABLE=0 on GPUs without P2P is refused unless ALLOW_P2P_WITHOUT_SUPPORT=true (for drivers
  patched to enable P2P, which NVML may not report).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from packaging.version import InvalidVersion, Version

from entrypoint.errors import Problem
from entrypoint.facts.inventory import Inventory
from entrypoint.recipe.load import Origin, Value

# accelerate's threshold (v0.29.0, PR #2558); HF's number, not NVIDIA's (no NVIDIA note names one).
ACCELERATE_RTX40_DRIVER_TEXT = "550.40.07"
ACCELERATE_RTX40_DRIVER = Version(ACCELERATE_RTX40_DRIVER_TEXT)
ACCELERATE_RTX40_SUBSTRING = "RTX 40"


def nccl_true(value: str | None) -> bool:
    """How NCCL reads a boolean variable: as an integer (strtol), so only a nonzero number is on;
    "true", "yes" and "" all mean 0 to NCCL."""
    try:
        return int((value or "").strip(), 0) != 0
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class Decision:
    variable: str
    value: str | None  # what the children see; None: not set
    reason: str
    set_by: str  # "entrypoint", or the layer the user set it in ("recipes/x.env:3", "environment", ...)

    def render(self) -> str:
        shown = f"{self.variable}={self.value}" if self.value is not None else f"{self.variable} unset"
        return f"{shown} ({self.reason}; {self.set_by})"


@dataclasses.dataclass(frozen=True)
class Policy:
    env: dict[str, str]  # what the entrypoint puts in the children's environment
    decisions: list[Decision]
    problems: list[Problem]


def accelerate_rtx40_check_fires(inventory: Inventory) -> bool:
    """Mirror of accelerate's `check_cuda_p2p_ib_support() == False` for this inventory."""
    if len(inventory.gpus) <= 1 or not inventory.driver_version:
        return False
    if not any(ACCELERATE_RTX40_SUBSTRING in g.name for g in inventory.gpus):
        return False
    try:
        return Version(inventory.driver_version) < ACCELERATE_RTX40_DRIVER
    except InvalidVersion:
        return False


def pairs_without_p2p(inventory: Inventory, gpus: Sequence[int]) -> list[tuple[int, int, str]]:
    """(a, b, status) for every pair of `gpus` whose P2P read status is not 'ok' (unknown counts)."""
    ordered = sorted(set(gpus))
    return [
        (a, b, inventory.p2p_status(a, b))
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
        if inventory.p2p_status(a, b) != "ok"
    ]


def describe_missing(missing: list[tuple[int, int, str]], n_gpus: int) -> str:
    """'GPUs 0,1: NVML reports P2P not_supported', or a summary when many pairs share a status."""
    if len(missing) <= 2:
        return "; ".join(f"GPUs {a},{b}: NVML reports P2P {status}" for a, b, status in missing)
    by_status: dict[str, list[tuple[int, int]]] = {}
    for a, b, status in missing:
        by_status.setdefault(status, []).append((a, b))
    total = n_gpus * (n_gpus - 1) // 2
    return "; ".join(
        f"NVML reports P2P {status} for {len(pairs)} of {total} pairs of GPUs "
        + ",".join(map(str, sorted({g for pair in pairs for g in pair})))
        for status, pairs in by_status.items()
    )


def interface_matches(spec: str, interfaces: Sequence[str]) -> list[str]:
    """Entries of an NCCL_SOCKET_IFNAME value (prefixes, `=exact`, `^excluded`) that match no interface."""
    unknown = []
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("^"):
            continue
        if entry.startswith("="):
            if entry[1:] not in interfaces:
                unknown.append(entry)
        elif not any(name.startswith(entry) for name in interfaces):
            unknown.append(entry)
    return unknown


def nccl_default_interfaces(interfaces: Sequence[str]) -> list[str]:
    """The interfaces NCCL's socket transport picks when NCCL_SOCKET_IFNAME is unset: those starting with
    `ib`, else every one but docker* and lo, else docker*, else lo (NCCL 2.21 src/misc/socket.cc,
    ncclFindInterfaces; NCCL user guide, NCCL_SOCKET_IFNAME)."""
    for wanted in (
        [i for i in interfaces if i.startswith("ib")],
        [i for i in interfaces if not i.startswith(("docker", "lo"))],
        [i for i in interfaces if i.startswith("docker")],
        [i for i in interfaces if i.startswith("lo")],
    ):
        if wanted:
            return wanted
    return []


def _unset_ifname(interfaces: Sequence[str] | None, listed: str) -> Problem:
    """NCCL_SOCKET_IFNAME unset on a multi-node socket run: a warning naming NCCL's likely choice, refused
    only when that choice cannot reach another node (lo, docker*) or is several interfaces at once."""
    where = "NCCL_SOCKET_IFNAME"
    if interfaces is None:
        return Problem(
            where,
            "unset on a run over several nodes without InfiniBand; NCCL picks an interface itself "
            "(ib*, else any but docker*/lo), and this inventory does not list the interfaces",
            "set NCCL_SOCKET_IFNAME=<interface> if the nodes share more than one network",
            fatal=False,
        )
    picked = nccl_default_interfaces(interfaces)
    if len(picked) == 1 and not picked[0].startswith(("docker", "lo")):
        return Problem(
            where,
            f"unset on a run over several nodes without InfiniBand: NCCL will likely use "
            f"{picked[0]} (its default: ib*, else any interface but docker*/lo; this node has: {listed})",
            f"set NCCL_SOCKET_IFNAME={picked[0]} to make it explicit, or another interface the nodes share",
            fatal=False,
        )
    if not picked or picked[0].startswith(("docker", "lo")):
        why = f"only {', '.join(picked) or 'no interface'}, which cannot reach another node"
    else:
        why = (
            f"{', '.join(picked)} at once, and a run hangs when one of them does not route to the other nodes"
        )
    return Problem(
        where,
        f"unset on a run over several nodes without InfiniBand: NCCL would use {why} "
        f"(this node has: {listed})",
        "set NCCL_SOCKET_IFNAME=<interface> (the one on the network the nodes share), the same on every node",
    )


def decide_multi_node(
    inventory: Inventory, user: Mapping[str, Value], gloo_user_set: bool
) -> tuple[dict[str, str], list[Decision], list[Problem]]:
    """NCCL_IB_DISABLE / NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME for a run over several nodes."""
    env: dict[str, str] = {}
    decisions: list[Decision] = []
    problems: list[Problem] = []
    interfaces = inventory.interfaces
    ib_disable = user["NCCL_IB_DISABLE"].value if "NCCL_IB_DISABLE" in user else "0"
    ib_on = bool(inventory.active_ib_ports()) and not nccl_true(ib_disable)
    if ib_on:
        decisions.append(
            Decision(
                "NCCL_SOCKET_IFNAME",
                user.get("NCCL_SOCKET_IFNAME", (None, ""))[0],
                "active IB here: NCCL crosses nodes over IB (every node is checked at start-up)",
                "entrypoint",
            )
        )
        return env, decisions, problems
    listed = ", ".join(interfaces) if interfaces else "unknown"
    if "NCCL_SOCKET_IFNAME" not in user:
        problems.append(_unset_ifname(interfaces, listed))
        return env, decisions, problems
    value, source = user["NCCL_SOCKET_IFNAME"].value, user["NCCL_SOCKET_IFNAME"].source
    unknown = interface_matches(value, interfaces) if interfaces is not None else []
    if unknown:
        problems.append(
            Problem(
                f"NCCL_SOCKET_IFNAME ({source})",
                f"{', '.join(unknown)} matches no network interface on this node (it has: {listed})",
                "use one of the listed interfaces (the one on the network the nodes share)",
            )
        )
    if not gloo_user_set and not value.startswith("^"):
        env["GLOO_SOCKET_IFNAME"] = value.lstrip("=").split(",")[0]
        decisions.append(
            Decision(
                "GLOO_SOCKET_IFNAME",
                env["GLOO_SOCKET_IFNAME"],
                "gloo (CPU collectives, rendezvous store) on NCCL's interface",
                "entrypoint",
            )
        )
    return env, decisions, problems


def _decide_p2p(
    gpus: Sequence[int],
    user: Mapping[str, Value],
    allow: bool,
    why: str,
    env: dict[str, str],
    decisions: list[Decision],
    problems: list[Problem],
) -> None:
    """NCCL_P2P_DISABLE. `why`: the reason these GPUs must not use P2P ("" when they may)."""
    if "NCCL_P2P_DISABLE" in user:
        given = user["NCCL_P2P_DISABLE"]
        value, source = given.value, given.source
        if not nccl_true(value) and why and not allow:
            numeric = value.strip().lstrip("-").isdigit()
            problems.append(
                Problem(
                    f"NCCL_P2P_DISABLE ({source})",
                    "set to "
                    f"{value!r}{'' if numeric else ', which NCCL reads as 0 (it reads integers: write 1)'}, "
                    f"but {why}; NCCL would try P2P transfers these GPUs cannot do (hangs or corrupt "
                    "results)",
                    "remove it (the entrypoint sets NCCL_P2P_DISABLE=1), or, on a driver patched to enable "
                    "P2P, set ALLOW_P2P_WITHOUT_SUPPORT=true",
                )
            )
        reason = "kept as the user set it" + (" (ALLOW_P2P_WITHOUT_SUPPORT=true)" if allow and why else "")
        if given.origin is not Origin.ENVIRONMENT:
            env["NCCL_P2P_DISABLE"] = value
        decisions.append(Decision("NCCL_P2P_DISABLE", value, reason, source))
    elif why:
        env["NCCL_P2P_DISABLE"] = "1"
        decisions.append(Decision("NCCL_P2P_DISABLE", "1", why, "entrypoint"))
    else:
        reason = (
            "one GPU in use: no peer traffic"
            if len(set(gpus)) == 1
            else "NVML reports P2P between all GPUs in use"
        )
        decisions.append(Decision("NCCL_P2P_DISABLE", None, reason, "entrypoint"))


def _decide_ib(
    inventory: Inventory,
    user: Mapping[str, Value],
    accelerate: bool,
    env: dict[str, str],
    decisions: list[Decision],
) -> None:
    """NCCL_IB_DISABLE: off without an active InfiniBand/RoCE port; present (0) for accelerate's check."""
    active = inventory.active_ib_ports()
    if "NCCL_IB_DISABLE" in user:
        given = user["NCCL_IB_DISABLE"]
        value, source = given.value, given.source
        if given.origin is not Origin.ENVIRONMENT:
            env["NCCL_IB_DISABLE"] = value
        decisions.append(Decision("NCCL_IB_DISABLE", value, "kept as the user set it", source))
    elif not active:
        env["NCCL_IB_DISABLE"] = "1"
        decisions.append(
            Decision(
                "NCCL_IB_DISABLE",
                "1",
                "no ACTIVE InfiniBand/RoCE port "
                + ("under /sys/class/infiniband" if inventory.source == "nvml" else f"in {inventory.source}"),
                "entrypoint",
            )
        )
    elif accelerate:
        env["NCCL_IB_DISABLE"] = "0"
        ports = ", ".join(f"{p.device} port {p.port}" for p in active)
        decisions.append(
            Decision(
                "NCCL_IB_DISABLE",
                "0",
                f"present for accelerate's check, IB kept on (active: {ports})",
                "entrypoint",
            )
        )
    else:
        ports = ", ".join(f"{p.device} port {p.port} ({p.link_layer})" for p in active)
        decisions.append(Decision("NCCL_IB_DISABLE", None, f"active RDMA ports: {ports}", "entrypoint"))


def decide(
    inventory: Inventory,
    gpus: Sequence[int],
    user: Mapping[str, Value],
    allow_p2p_without_support: bool = False,
    nnodes: int = 1,
    gloo_user_set: bool = False,
) -> Policy:
    """Decide the NCCL variables for a run on `gpus` (every GPU it uses, training and rollout).

    Args:
        inventory: the machine.
        gpus: in-container ordinals the run uses; empty for a CPU run.
        user: NCCL variables the user set, name -> their recipe.load Value, from recipe, CLI or environment.
        allow_p2p_without_support: the opt-in key ALLOW_P2P_WITHOUT_SUPPORT.

    Returns a Policy; its `problems` hold the refused NCCL_P2P_DISABLE=0 (fatal).
    """
    env: dict[str, str] = {}
    decisions: list[Decision] = []
    problems: list[Problem] = []

    for name, given in sorted(user.items()):
        if name not in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE"):
            if given.origin is not Origin.ENVIRONMENT:
                env[name] = given.value
            decisions.append(Decision(name, given.value, "set by the user", given.source))

    if nnodes > 1:
        extra_env, extra, found = decide_multi_node(inventory, user, gloo_user_set)
        env.update(extra_env)
        decisions += extra
        problems += found
    if not gpus:
        decisions.append(Decision("NCCL_P2P_DISABLE", None, "no GPU in use: NCCL is not used", "entrypoint"))
        return Policy(env, decisions, problems)

    accelerate = accelerate_rtx40_check_fires(inventory)
    names = sorted({g.name for g in inventory.gpus})
    accelerate_reason = (
        f"{len(inventory.gpus)} GPUs visible ({', '.join(names)}) with driver {inventory.driver_version} "
        f"< {ACCELERATE_RTX40_DRIVER_TEXT}: accelerate raises NotImplementedError unless NCCL_P2P_DISABLE "
        "and NCCL_IB_DISABLE are both set, counting every GPU nvidia-smi lists even when the job uses one"
    )
    missing = pairs_without_p2p(inventory, gpus)
    missing_reason = describe_missing(missing, len(set(gpus)))
    p2p_why = missing_reason or (accelerate_reason if accelerate else "")
    _decide_p2p(gpus, user, allow_p2p_without_support, p2p_why, env, decisions, problems)
    _decide_ib(inventory, user, accelerate, env, decisions)
    return Policy(env, decisions, problems)
