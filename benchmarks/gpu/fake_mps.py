"""A fake ``nvidia-cuda-mps-control`` for machines without NVIDIA MPS: the tests' and
``gpu_suite.py --device cpu --tiny``'s.

The fake records every invocation (JSON lines in $FAKE_MPS_RECORD). ``-d`` forks a background
"daemon" (the same script with ``--serve``) that creates ``$CUDA_MPS_PIPE_DIRECTORY/control`` and
lives until a ``quit`` arrives; $FAKE_MPS_MODE=refuse makes ``-d`` fail as without permission,
=deaf makes the daemon ignore ``quit`` (it must then be killed).
"""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

__all__ = ["FAKE", "install"]

CONTROL = "nvidia-cuda-mps-control"

FAKE = textwrap.dedent("""\
    #!{python}
    import json, os, subprocess, sys, time
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    control = os.path.join(pipe, "control")
    marker = os.path.join(pipe, "quit-requested")
    mode = os.environ.get("FAKE_MPS_MODE", "ok")

    def record(what):
        with open(os.environ["FAKE_MPS_RECORD"], "a") as f:
            f.write(json.dumps({{"what": what, "pipe": pipe,
                                "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY")}}) + "\\n")

    args = sys.argv[1:]
    if args == ["-d"]:
        record("start")
        if mode == "refuse":
            print("Insufficient Permissions", file=sys.stderr)
            sys.exit(1)
        if os.path.exists(control):
            print("An instance of this daemon is already running", file=sys.stderr)
            sys.exit(1)
        # like a sloppy daemon, the child keeps the parent's stdout and stderr open
        subprocess.Popen([sys.executable, __file__, "--serve"], start_new_session=True,
                         stdin=subprocess.DEVNULL)
    elif args == ["--serve"]:
        os.makedirs(pipe, exist_ok=True)
        with open(control, "w") as f:
            f.write(str(os.getpid()))
        while not (os.path.exists(marker) and mode != "deaf"):
            time.sleep(0.02)
        os.unlink(marker)
        os.unlink(control)
    else:
        command = sys.stdin.read().strip()
        record(command)
        if not os.path.exists(control):
            print("Cannot find MPS control daemon process", file=sys.stderr)
            sys.exit(1)
        open(marker, "w").close()
""")


def install(folder: Path) -> dict[str, str]:
    """Write the fake control program into ``folder/bin`` and return the environment that puts
    it first on PATH (``PATH``, and ``FAKE_MPS_RECORD``: ``folder/calls.jsonl``)."""
    bindir = Path(folder) / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / CONTROL
    script.write_text(FAKE.format(python=sys.executable))
    script.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_MPS_RECORD": str(Path(folder) / "calls.jsonl")}
