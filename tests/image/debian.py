"""What the container tests share: a Debian root filesystem made with
debootstrap from this machine's apt mirror (no image can be pulled here),
and free loopback ports."""

import pathlib
import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _codename():
    for line in pathlib.Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    return "bookworm"


def _mirror():
    for f in pathlib.Path("/etc/apt/sources.list.d").glob("*.sources"):
        for line in f.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def debootstrap(rootfs, include=()):
    """A minimal Debian of this machine's release in `rootfs`, with the
    packages `include` names."""
    args = ["debootstrap", "--variant=minbase"]
    if include:
        args.append("--include=" + ",".join(include))
    done = subprocess.run([*args, _codename(), str(rootfs), _mirror()], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"debootstrap failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr}")
