"""The example notebook runs top to bottom, in a real Jupyter kernel (nbclient), against the
test session's Ray cluster (the kernel joins it through RAY_ADDRESS)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import ray

pytestmark = [pytest.mark.ray, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parent.parent


def test_example_notebook_runs_and_renders_the_live_view(cluster):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    # jupyter_client starts a "python" kernelspec with sys.executable: this venv's python
    client.execute(env=env)

    outputs = {i: c.get("outputs", []) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    errors = [o for outs in outputs.values() for o in outs if o["output_type"] == "error"]
    assert not errors, errors
    html = [o["data"]["text/html"] for outs in outputs.values() for o in outs
            if "text/html" in o.get("data", {})]
    # the handle and the stats render as the per-component table, with levels
    assert any("topology notebook-wordcount" in h and "<th>backpressured</th>" in h
               for h in html), html[:2]
    assert any("complete" in h for h in html)
    text = "".join(o.get("text", "") for outs in outputs.values() for o in outs
                   if o["output_type"] == "stream")
    assert "27 words, 128,000 counted, 20,000 sentences acked" in text, text[-2000:]


def test_progress_counts_items_taken_of_the_total(cluster, name, capsys):
    from tests.components import PassBolt
    from topology import IterableSpout, TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("src", IterableSpout([(i, "k") for i in range(5000)], fields=("seq", "key")),
                2)
    b.set_bolt("pass", PassBolt(delay_s=0.0002)).shuffle_grouping("src")
    handle = cluster.submit_topology(name, {"topology.max.spout.pending": 100},
                                     b.create_topology())
    try:
        assert handle.wait(120, progress=True)
        assert handle.progress() == {"src": (5000, 5000)}
        html = handle._repr_html_()
    finally:
        cluster.kill_topology(name)
    assert "5,000 / 5,000 (100%)" in html and "complete" in html
    bar = capsys.readouterr().err  # tqdm draws on stderr outside Jupyter
    assert "5000/5000" in bar, bar[-500:]
