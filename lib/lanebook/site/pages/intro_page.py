"""The introduction: the book's hand-written text (book/intro.md) with the lane's topology drawn at build time.

The picture is drawn offline with matplotlib from the lane files: for the current real lane and for the twin
lane, the head (the API server, tensor-parallel rank 0), the worker (headless rank 1), the RoCE link between
them, the OpenAI-compatible API and the Hermes client that calls it. Which lanes: the pairs no other pair rolls
back to (the head of each rollback chain), one real and one twin; a lane of more nodes is named under the picture,
its nodes listed on the lane matrix page. What is drawn is a pure function of a lane
(`topology`), tested with exact values; `draw` only places it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from lanebook.base.errors import LanebookError
from lanebook.lane.params import LaneParams

MARKER = "<!-- topology -->"  # where book/intro.md takes the picture
PICTURE = "topology.png"


@dataclass(frozen=True)
class Topology:
    title: str
    twin: bool
    head: str
    worker: str
    roce: str
    api: str
    client: str


def _node(params: LaneParams, node) -> str:
    via = f" (via {node.jump})" if node.jump else ""
    login = f"{node.user}@" if node.user else ""
    port = f":{node.port}" if node.port != 22 else ""
    return f"{node.alias}: {login}{node.host}{port}{via}\nRoCE IP {node.roce_ip}"


def topology(params: LaneParams) -> Topology:
    """What the picture says about one lane: every label from its lane file."""
    head, workers = params.head, params.workers
    interface = params.env.get("NCCL_SOCKET_IFNAME")
    roce_ips = " ↔ ".join([head.roce_ip] + [w.roce_ip for w in workers])
    return Topology(
        title=(f"TWIN lane {params.name} (digital twin on loopback)" if params.twin else f"REAL lane {params.name}"),
        twin=params.twin,
        head=_node(params, head) + "\nvLLM API server, TP rank 0",
        worker="\n".join(_node(params, w) for w in workers)
        + f"\nheadless TP rank{'s' if len(workers) > 1 else ''} "
        + ", ".join(str(i + 1) for i in range(len(workers))),
        roce=(f"RoCE link ({interface})" if interface else "RoCE link") + f"\n{roce_ips}\nTP traffic, weights rsync",
        api=f"OpenAI-compatible API\n{params.api}\nserves {params.served_model_name}",
        client=f"Hermes client\nprovider {params.hermes.provider}\ncontext {params.hermes.context_length:,}",
    )


def pairs(lanes: list[LaneParams]) -> list[LaneParams]:
    """The lanes of one head and one worker: the recipe's shape, the one the picture draws."""
    return [lane for lane in lanes if len(lane.workers) == 1]


def shown_lanes(lanes: list[LaneParams]) -> list[LaneParams]:
    """The head of each rollback chain of pairs (no pair rolls back to it): the current real lane, then the twin
    lane. A lane with a rollback lane comes before one without (real-vllm-cpu, a test-bed lane, has none: the twin
    does)."""
    lanes = pairs(lanes)
    targets = {lane.rollback for lane in lanes if lane.rollback}
    heads = sorted((lane for lane in lanes if lane.name not in targets), key=lambda lane: lane.rollback is None)
    shown = [lane for lane in heads if not lane.twin][:1] + [lane for lane in heads if lane.twin][:1]
    if not shown:
        raise LanebookError("no lane to draw: every lane under params/ is another lane's rollback target")
    return shown


def draw(topologies: list[Topology]) -> bytes:
    """PNG of the topologies side by side, one panel each (matplotlib, no network, no fonts beyond its own)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, axes = plt.subplots(1, len(topologies), figsize=(7.2 * len(topologies), 5.2), squeeze=False)
    for ax, topo in zip(axes[0], topologies):
        colour = "#8250df" if topo.twin else "#0969da"
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 8)
        ax.axis("off")

        def box(x, y, w, h, text, face):
            ax.add_patch(
                FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.08", facecolor=face, edgecolor=colour, lw=1.5)
            )
            ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)

        box(0.2, 1.4, 4.0, 2.2, topo.head, "#ffffff")  # head, bottom left
        box(5.8, 1.4, 4.0, 2.2, topo.worker, "#ffffff")  # worker, bottom right
        box(0.2, 6.2, 4.0, 1.5, topo.client, "#f6f8fa")  # the client, top left
        ax.annotate("", xy=(4.3, 2.5), xytext=(5.7, 2.5), arrowprops=dict(arrowstyle="<->", color=colour, lw=2.5))
        ax.text(5.0, 0.55, topo.roce, ha="center", va="center", fontsize=8.5, color="#24292f")
        ax.annotate("", xy=(2.2, 3.75), xytext=(2.2, 6.05), arrowprops=dict(arrowstyle="->", color=colour, lw=1.8))
        ax.text(2.5, 4.9, topo.api, ha="left", va="center", fontsize=8.5, color="#24292f")
        ax.set_title(topo.title, fontsize=11, color=colour, fontweight="bold")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()


def figure_markdown(topologies: list[Topology], larger: list[LaneParams] = ()) -> str:
    """The figure and its caption; LARGER: the lanes of more than two nodes, named, not drawn."""
    alt = "; ".join(t.title for t in topologies)
    named = ", ".join(f"{lane.name} ({len(lane.nodes)} nodes)" for lane in larger)
    caption = (
        "The lane's topology, drawn from the lane files when this book was built: the Hermes client calls "
        "the OpenAI-compatible API on the head; head and worker run one model in tensor parallel over the "
        "RoCE link. "
        + " ".join(f"**{t.title}**." for t in topologies)
        + " The twin gives each node its own loopback address, so the same runbooks reach it over real SSH."
        + (
            f" This is the pair's drawing: lanes of more nodes, {named}, run one model across all their nodes (the "
            "head rank 0, the workers ranks 1..N-1); the lane matrix lists their nodes."
            if named
            else ""
        )
    )
    return f"```{{figure}} {PICTURE}\n:alt: Lane topology: {alt}\n:width: 100%\n\n{caption}\n```\n"


def intro_page(text: str, lanes: list[LaneParams]) -> tuple[str, bytes]:
    """book/intro.md with the topology figure at its marker, and the picture's PNG."""
    if MARKER not in text:
        raise LanebookError(f"book/intro.md has no {MARKER} line: the topology picture goes there")
    topologies = [topology(lane) for lane in shown_lanes(lanes)]
    larger = [lane for lane in lanes if len(lane.workers) > 1]
    return text.replace(MARKER, figure_markdown(topologies, larger)), draw(topologies)
