"""Logs from machines with LANG=zh_CN.UTF-8 (or zh_TW): the C library translates the error
texts that signatures name (strerror, the resolver, signal names), so torch's `errno: 98 - ...`,
ssh's `port 22: ...` and NCCL's `failed : ...` end in Chinese. diagnose must read them as the
English ones."""

import pytest

from ddpkit.troubleshoot.diagnose.lines import english
from ddpkit.troubleshoot.diagnose.matcher import diagnose_report

PAIRS = [
    ("RuntimeError: The server socket has failed to listen on any local network address. The "
     "server socket has failed to bind to [::]:29500 (errno: 98 - {})", "地址已在使用",
     "Address already in use"),
    ("ssh: connect to host node2 port 22: {}", "拒绝连接", "Connection refused"),
    ("ssh: connect to host node2 port 22: {}", "連線被拒絕", "Connection refused"),
    ("node1:2345:2401 [0] misc/socket.cc:456 NCCL WARN Net : Connect to 10.1.1.2<46121> "
     "failed : {}", "拒绝连接", "Connection refused"),
    ("torch.distributed.DistNetworkError: The client socket has failed to connect to "
     "[node1]:29500 (errno: 110 - {}).", "连接超时", "Connection timed out"),
    ("socket.gaierror: [Errno -2] {}", "未知的名称或服务", "Name or service not known"),
    ("{}", "总线错误（核心已转储）", "Bus error (core dumped)"),
    ("bash: torchrun{}", "：指令找不到", ": command not found"),
]


OTHER_LOCALES = [
    # glibc's and bash's texts of other locales (libc.mo, bash.mo) and Windows' WinSock texts
    ("ssh: connect to host node2 port 22: {}", "接続を拒否されました", "Connection refused"),
    ("ssh: connect to host node2 port 22: {}", "В соединении отказано", "Connection refused"),
    ("./run.sh: line 3: 25467 {}            torchrun --nproc_per_node=8 train.py", "強制終了",
     "Killed"),
    ("./run.sh: line 3: 25912 {}                torchrun --nproc_per_node=8 train.py", "Getötet",
     "Killed"),
    ("node2: bash: torchrun{}", ": команда не найдена", ": command not found"),
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
     "network address. The server socket has failed to bind to [::]:29500 (system error: 10048 "
     "- {})", "通常每个套接字地址(协议/网络地址/端口)只允许使用一次。",
     "Only one usage of each socket address (protocol/network address/port) is normally "
     "permitted."),
    ("OSError: [WinError 1455] {} Error loading \"C:\\torch\\lib\\cublas64_11.dll\"",
     "页面文件太小，无法完成操作。", "The paging file is too small for this operation to complete."),
]


@pytest.mark.parametrize("line,local,eng", PAIRS + OTHER_LOCALES, ids=lambda v: v if len(v) < 12 else None)
def test_a_non_english_locale_gets_the_same_answer_as_english(line, local, eng):
    want = [f.category for f in diagnose_report([line.format(eng)]).findings][:1]
    got = [f.category for f in diagnose_report([line.format(local)]).findings][:1]
    assert want and want != ["unknown"], want
    assert got == want


def test_only_non_ascii_text_is_touched_and_lines_stay_lines():
    text = "a\nssh: connect to host n port 22: 拒绝连接\nb 没有那个设备或地址\n"
    out = english(text)
    assert out.count("\n") == text.count("\n")
    assert "port 22: Connection refused" in out
    assert "No such device or address" in out  # the longer phrase first, not "No such device"
    ascii_text = "Connection refused\n" * 3
    assert english(ascii_text) is ascii_text


def test_the_evidence_shows_the_line_as_it_was_printed():
    lines = ["step 1", "ssh: connect to host node2 port 22: 拒绝连接"]
    report = diagnose_report(lines)
    assert report.findings[0].category == "ssh_failure"
    assert report.findings[0].evidence["text"] == lines[1]
    assert lines[1] in [d["text"] for d in report.decisive]
