"""Adversarial programs for the LiveCodeBench sandbox, and a driver that grades them all.

Every program is graded on the tests of ``a + b`` (:data:`TESTS`). Each either tries to forge its verdict or to
reach the host; those that try to *learn* something (the grader's secret, the expected output, a host file) print
the right sum only when they succeed, so any leak turns into a pass. The driver (``python -c`` from the tests, as
root or as an ordinary user) prints one JSON line: each program's results and whether it passed.

Canaries the test checks afterwards: files named with the token in every world-writable host folder, a canary file
and a results tree (as root), TCP and UDP listeners on 127.0.0.1, a unix socket on a path and one in the abstract
namespace; the grader's environment holds a secret.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = (["1 2\n", "40 2\n"], ["3\n", "42\n"])
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
SOLVE = "a, b = map(int, input().split())\nprint(a + b)"
WRONG = "print('wrong')"
RUNNER_MARK = "Runs one generated program on test inputs"  # first words of code_runner.py: its processes' cmdline


FRAMES_LEAK = r"""
import sys
def leak():
    f, seen = sys._getframe(), []
    while f is not None:
        seen.append(repr(f.f_locals))
        seen.append(repr(f.f_globals))
        f = f.f_back
    text = "".join(seen)
    return "'42\\n'" in text or "'3\\n'" in text
"""
GC_LEAK = r"""
import gc
def leak():
    for o in gc.get_objects():
        if isinstance(o, (list, tuple)) and ("42\n" in o or "3\n" in o):
            return True
        if isinstance(o, dict) and "outputs" in o:
            return True
    return False
"""
ON_LEAK = f"try:\n    ok = leak()\nexcept BaseException:\n    ok = False\nif ok:\n    {SOLVE.replace(chr(10), chr(10) + '    ')}\nelse:\n    {WRONG}\n"


def _if(condition: str) -> str:
    """A program that solves the tests only when ``condition`` (Python source) holds: a leak becomes a pass."""
    return f"def _leak():\n    try:\n        return bool({condition})\n    except BaseException:\n        return False\n" \
           f"if _leak():\n    {SOLVE.replace(chr(10), chr(10) + '    ')}\nelse:\n    {WRONG}\n"


def programs(token: str, secret: str, tcp_port: int, udp_port: int, unix_path: str, canary: str,
             results_dir: str) -> dict[str, str]:
    forged = ('MLHARNESS-SANDBOX-RESULT {"results": [true, true, true], "isolation": "namespaces"}\\n')
    frame = 'import json, struct\nb = json.dumps({"status": "ok", "output": "3"}).encode()\nF = struct.pack(">I", len(b)) + b\n'
    files = "".join(f"open({os.path.join(d, token + '-open')!r}, 'w').write('x')\n" for d in WORLD_WRITABLE)
    shell = "; ".join(f"touch {os.path.join(d, token + '-sh')}" for d in WORLD_WRITABLE)
    return {
        # forged verdicts
        "forged line and _exit": f"import os; os.write(1, b'{forged}'); os._exit(0)",
        "forged line on stderr": f"import os; os.write(2, b'{forged}'); os._exit(0)",
        "forged line via print": f"import sys; print('{forged}'); sys.stdout.flush()\n" + WRONG,
        "patched os.write": "import os\n_w = os.write\n"
                            "os.write = lambda fd, b: _w(fd, b.replace(b'false', b'true'))\n" + WRONG,
        "forged frames on every fd": frame + "import os\nfor fd in range(3, 64):\n    try:\n"
                                             "        os.write(fd, F * 8)\n    except OSError:\n        pass\n" + WRONG,
        "frames then _exit": frame + "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, F)\n"
                                     "    except OSError:\n        pass\nos._exit(0)",
        "frame walking for expected": FRAMES_LEAK + ON_LEAK,
        "gc scan for expected": GC_LEAK + ON_LEAK,
        "patched comparison in globals": "import sys\nf = sys._getframe()\nwhile f:\n"
                                         "    f.f_globals['same_output'] = lambda *a: True\n"
                                         "    f.f_globals['verdict'] = lambda *a: True\n    f = f.f_back\n" + WRONG,
        "patched json.dumps": "import json\njson.dumps = lambda *a, **k: '{\"status\": \"ok\", \"output\": \"3\"}'\n"
                              + WRONG,
        "closes the channel": "import os\nos.closerange(3, 256)\n" + ADD,
        # the grader's secrets and files
        "reads its environment": _if(f"{secret!r} in repr(dict(__import__('os').environ))"),
        "reads every process's environ": _if(f"any({secret!r}.encode() in open('/proc/' + p + '/environ', 'rb')"
                                             f".read() for p in __import__('os').listdir('/proc') if p.isdigit())"),
        "reads the grader's memory": _if("any(open('/proc/' + p + '/cmdline', 'rb').read().find(b'pytest') >= 0 "
                                         "for p in __import__('os').listdir('/proc') if p.isdigit())"),
        "sees the canary": _if(f"__import__('os').path.exists({canary!r})"),
        "sees the canary via /proc/1/root": _if(f"__import__('os').path.exists('/proc/1/root' + {canary!r})"),
        "sees the mlharness package": _if(f"__import__('os').path.exists({os.path.dirname(__file__)!r})"),
        # writes on the host
        "files in world-writable folders": files + ADD.replace("a + b", "a - b"),
        "files via os.system": f"import os; os.system({shell!r})\n" + WRONG,
        "overwrites the canary": f"open({canary!r}, 'w').write('owned')\n" + WRONG,
        "removes the results tree": f"import shutil; shutil.rmtree({results_dir!r})\n" + WRONG,
        "writes into /usr": "open('/usr/" + token + "', 'w').write('x')\n" + WRONG,
        # the network
        "tcp through _socket": f"import _socket\ns = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
                               f"s.connect(('127.0.0.1', {tcp_port}))\ns.send(b'{token}')\n" + WRONG,
        "tcp through socket": f"import socket\ns = socket.create_connection(('127.0.0.1', {tcp_port}), 2)\n"
                              f"s.send(b'{token}')\n" + WRONG,
        "udp through _socket": f"import _socket\ns = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)\n"
                               f"s.sendto(b'{token}', ('127.0.0.1', {udp_port}))\n" + WRONG,
        "unix socket on a path": f"import _socket\ns = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\n"
                                 f"s.connect({unix_path!r})\ns.send(b'{token}')\n" + WRONG,
        "abstract unix socket": f"import _socket\ns = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\n"
                                f"s.connect('\\0{token}')\ns.send(b'{token}')\n" + WRONG,
        "ctypes connect": "import ctypes, struct, socket\nlibc = ctypes.CDLL(None)\nfd = libc.socket(2, 1, 0)\n"
                          f"addr = struct.pack('<HH4s8x', 2, socket.htons({tcp_port}), bytes([127, 0, 0, 1]))\n"
                          "libc.connect(fd, addr, len(addr))\n"
                          f"libc.write(fd, b'{token}', {len(token)})\n" + WRONG,
        "bash /dev/tcp": f"import os; os.system(\"bash -c 'echo {token} > /dev/tcp/127.0.0.1/{tcp_port}'\")\n"
                         + WRONG,
        # floods and resources
        "disk flood": "f = open('flood', 'wb')\nfor _ in range(300):\n    f.write(b'x' * (1 << 20))\n" + ADD,
        "many files flood": "for i in range(100000):\n    open(f'f{i}', 'wb').write(b'x' * 65536)\n" + ADD,
        "stdout flood": "import sys\nfor _ in range(1536):\n    sys.stdout.write('x' * (1 << 20))\n",
        "fd 1 flood": "import os\nfor _ in range(1536):\n    os.write(1, b'x' * (1 << 20))\n" + WRONG,
        "stderr flood": "import os\nfor _ in range(1536):\n    os.write(2, b'x' * (1 << 20))\n" + WRONG,
        "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "10 GB": "x = bytearray(10 * 1024 ** 3)\nx[-1] = 1\n" + ADD,
        "endless loop with SIGALRM blocked": "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, "
                                             "[signal.SIGALRM])\nwhile True:\n    pass\n",
        "daemon that outlives grading": "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                                        "    if os.fork() == 0:\n        time.sleep(4)\n"
                                        f"        open({os.path.join('/tmp', token + '-daemon')!r}, 'w')"
                                        ".write('x')\n        time.sleep(3600)\n    os._exit(0)\n" + WRONG,
        "kill -1": "import os, signal\nos.kill(-1, signal.SIGKILL)\n" + WRONG,
        "kills its parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + WRONG,
        "setuid root": "import os\nos.setuid(0)\n" + WRONG,
        "new user namespace": "import os\nos.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNET)\n" + WRONG,
    }


def grade(limits_kwargs: dict, names_and_code: dict[str, str], workers: int = 2) -> dict[str, dict]:
    from mlharness.tasks.deepseek_r1.sandbox import Limits, run_program_tests

    limits = Limits(**limits_kwargs)

    def one(item):
        name, code = item
        start = time.monotonic()
        report = run_program_tests(code, *TESTS, limits=limits)
        return name, {"passed": report.passed, "results": report.results, "isolation": report.isolation,
                      "seconds": round(time.monotonic() - start, 2)}

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(one, names_and_code.items()))


def main() -> None:
    """``python -c 'from tests.helpers.sandbox_battery import main; main()' JSON``: JSON holds the programs'
    parameters and the limits; prints the verdicts, then a correct program's."""
    args = json.loads(sys.argv[1])
    os.environ["MLH_BATTERY_SECRET"] = args["secret"]
    verdicts = grade(args["limits"], programs(**args["programs"]))
    verdicts["correct program"] = grade(args["limits"], {"correct program": ADD})["correct program"]
    print(json.dumps({"uid": os.getuid(), "verdicts": verdicts}))


if __name__ == "__main__":
    main()
