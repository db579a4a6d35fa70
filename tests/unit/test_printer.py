"""Output labels: host:rank, padded, coloured per node only in a terminal."""

import io

import pytest

from ddpkit.launch.hosts import Host
from ddpkit.launch.output import NodeRun, Printer, TeardownEcho
from ddpkit.launch.plan import NodePlan


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


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_a_worker_sigkilled_by_torchrun_is_an_echo_in_every_language(lang):
    """Node b's own worker died first with an exception; node a's torchrun then SIGKILLed its
    worker. The root failure is b, whatever language the summary is written in."""
    import io

    from ddpkit.i18n import set_language
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.plan import LaunchOptions, NodeFacts, make_plan
    from ddpkit.launch.remote import SshOptions
    from ddpkit.launch.supervise import Supervisor

    set_language(lang)
    try:
        hosts = [Host("a", 1), Host("b", 1)]
        plan = make_plan(hosts, LaunchOptions(script="t.py"), {}, [NodeFacts(), NodeFacts()])
        sup = Supervisor(plan, SshOptions(), Printer(io.StringIO(), io.StringIO(), 8, None))
        a, b = sup.nodes
        sup._note_error(a, None, "torch.distributed.elastic.multiprocessing.api: failed "
                                 "(exitcode: -9) local_rank: 0 (pid: 12) of binary: python")
        sup._note_error(b, 0, "ValueError: bad batch")
        a.first_error, a.state, a.error_at = a.agent_error, "failed", 1.0
        b.state, b.error_at = "failed", 2.0
        sup.first_failure = a
        assert sup._root_failure() is b
        assert ("SIGKILL" in a.first_error) and (("被" in a.first_error) == (lang == "zh_CN"))
    finally:
        set_language("en")


def _two_node_supervisor():
    import io

    from ddpkit.launch.hosts import Host
    from ddpkit.launch.plan import LaunchOptions, NodeFacts, make_plan
    from ddpkit.launch.remote import SshOptions
    from ddpkit.launch.supervise import Supervisor

    hosts = [Host("a", 1), Host("b", 1)]
    plan = make_plan(hosts, LaunchOptions(script="t.py"), {}, [NodeFacts(), NodeFacts()])
    return Supervisor(plan, SshOptions(), Printer(io.StringIO(), io.StringIO(), 8, None))


def _teardown_race(stopped_line, failed_line):
    """Node a's torchrun is stopped by the teardown after its worker printed `stopped_line`;
    node b's torchrun exited first, failed, after `failed_line` (b's line arrived first)."""
    sup = _two_node_supervisor()
    a, b = sup.nodes
    sup._note_error(b, 1, failed_line)
    b.state, b.exit_code, b.error_at = "failed", 1, 1.0
    sup.first_failure, sup.reason, sup.tearing_down_at = b, "failure", 1.2
    sup._note_error(a, 0, stopped_line)
    a.error_at = 1.5  # its line came through SSH after b's
    a.marker = {"code": 143, "torn_down": True}
    sup._finish(a, 143)
    return sup._result()


CLOSED = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.1]:4242"


def test_the_node_that_raised_is_first_even_when_the_teardown_stopped_it():
    """CI saw this race: node a's rank raised, node b's rank saw the dead connection and b's
    torchrun exited first, so the teardown stopped a before its own torchrun reported. The
    summary must still name a (its worker raised), not b (a consequence)."""
    result = _teardown_race("RuntimeError: planned failure on rank 0", CLOSED)
    assert result.first_failure == "a" and result.exit_code == 1
    assert [n["state"] for n in result.nodes] == ["failed", "failed"]


def test_a_node_stopped_while_its_workers_were_killed_is_not_the_root():
    """Nodes the teardown stopped whose workers printed only consequences (or nothing) stay
    stopped; the node that failed on its own is first."""
    result = _teardown_race(CLOSED, "ValueError: bad batch")
    assert result.first_failure == "b" and [n["state"] for n in result.nodes] == ["stopped", "failed"]


AGENT_TRACEBACK = ["Traceback (most recent call last):",
                   '  File "<frozen runpy>", line 198, in _run_module_as_main',
                   "    time.sleep(monitor_interval)",
                   "           ^^^^^^^^^^^^^^^^^^^^^^", "",
                   "During handling of the above exception, another exception occurred:",
                   '  File "/x/torch/distributed/elastic/multiprocessing/api.py", line 86, in _h']
SIGNALLED = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 519 got signal: 15"
CHILD = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "


@pytest.mark.parametrize("tearing_down, last, shown", [
    # our teardown's SIGTERM: torchrun's traceback is one line
    (True, SIGNALLED, ["torchrun stopped on the teardown's signal 15 (its traceback is in "
                       "node0.log of the run record)"]),
    # any other traceback during a teardown is shown whole, once complete
    (True, CHILD, AGENT_TRACEBACK + [CHILD]),
    # outside a teardown nothing is held back, SignalException included (Ctrl-C sent to it alone)
    (False, SIGNALLED, AGENT_TRACEBACK + [SIGNALLED]),
])
def test_torchrun_traceback_at_teardown(tearing_down, last, shown):
    echo, got = TeardownEcho(), []
    for line in AGENT_TRACEBACK + [last, "W1204 12:00:00 api.py:1] next line"]:
        got += echo.feed(line, tearing_down, "node0.log")
    assert got == shown + ["W1204 12:00:00 api.py:1] next line"]


def test_a_traceback_cut_off_at_teardown_is_shown_at_the_end():
    echo = TeardownEcho()
    assert [echo.feed(line, True, "n.log") for line in AGENT_TRACEBACK[:3]] == [[], [], []]
    assert echo.flush() == AGENT_TRACEBACK[:3] and echo.flush() == []
