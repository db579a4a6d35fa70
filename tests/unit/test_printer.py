"""Output labels: host:rank, padded, coloured per node only in a terminal."""

import io

from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import NodePlan
from ddpkit.launch.output import NodeRun, Printer


class Tty(io.StringIO):
    def isatty(self):
        return True


def node(name, color="36"):
    plan = NodePlan(host=Host(name), node_rank=0, nproc=1, local=False, argv=(), env={},
                    workdir="/")
    return NodeRun(plan, color)


def test_plain_stream_gets_plain_labels(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    p = Printer(out, err, 9, tmp_path / "logs")
    p.line(node("node1"), 3, "hello", out)
    p.line(node("node1"), None, "torchrun says", err)
    p.close()
    assert out.getvalue() == "node1:3   | hello\n"
    assert err.getvalue() == "node1:-   | torchrun says\n"
    assert (tmp_path / "logs" / "rank3.log").read_text() == "hello\n"
    assert (tmp_path / "logs" / "node1.log").read_text() == "torchrun says\n"


def test_terminal_gets_a_colour_per_node():
    out = Tty()
    p = Printer(out, io.StringIO(), 8, None)
    p.line(node("a", "36"), 0, "x", out)
    p.line(node("b", "33"), 1, "y", out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("\x1b[36ma:0") and lines[1].startswith("\x1b[33mb:1")


def test_console_false_only_logs(tmp_path):
    out = io.StringIO()
    p = Printer(out, io.StringIO(), 8, tmp_path)
    p.line(node("a"), None, "*****", out, console=False)
    p.close()
    assert out.getvalue() == "" and (tmp_path / "a.log").read_text() == "*****\n"
