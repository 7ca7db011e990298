#!/usr/bin/env python3
"""Writes the JIT image of a loaded BPF program to a file, for `objdump`.

Debian's bpftool here is built without libbfd, so `bpftool prog dump jited` prints nothing;
the image itself comes from the kernel with BPF_OBJ_GET_INFO_BY_FD (`jited_prog_len`,
`jited_prog_insns`). Run as root while the program is loaded (a collector running), then:

    python3 xtask/bench/jit-dump.py sched_switch /tmp/jit.bin
    objdump -D -b binary -m i386:x86-64 /tmp/jit.bin      # aarch64: -m aarch64

The image's order follows `bpftool prog dump xlated id ID linum` (which does work), so the
two read side by side. Used in session 37 to see where the switch program's fast path lies.
"""
import ctypes
import json
import os
import struct
import subprocess
import sys

BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
# Offsets in struct bpf_prog_info (include/uapi/linux/bpf.h).
JITED_PROG_LEN = 16
JITED_PROG_INSNS = 24
INFO_LEN = 256
SYS_BPF = {"x86_64": 321, "aarch64": 280}[os.uname().machine]

libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    fd = libc.syscall(SYS_BPF, cmd, buf, 128)
    if fd < 0:
        err = ctypes.get_errno()
        sys.exit(f"jit-dump: bpf({cmd}): {os.strerror(err)} (run as root)")
    return fd


def prog_id(name):
    try:
        progs = json.loads(subprocess.check_output(["bpftool", "-j", "prog", "show"]))
    except FileNotFoundError:
        sys.exit("jit-dump: bpftool is not installed (cargo xtask bench installs it)")
    ids = [p["id"] for p in progs if p.get("name") == name]
    if len(ids) != 1:
        sys.exit(f"jit-dump: {len(ids)} loaded programs named {name}: start one collector")
    return ids[0]


def jited(fd):
    info = ctypes.create_string_buffer(INFO_LEN)
    bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, INFO_LEN, ctypes.addressof(info)))
    length = struct.unpack_from("I", info, JITED_PROG_LEN)[0]
    code = ctypes.create_string_buffer(length)
    info = ctypes.create_string_buffer(INFO_LEN)
    struct.pack_into("I", info, JITED_PROG_LEN, length)
    struct.pack_into("Q", info, JITED_PROG_INSNS, ctypes.addressof(code))
    bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, INFO_LEN, ctypes.addressof(info)))
    return code.raw


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: jit-dump.py PROGRAM_NAME OUTPUT_FILE")
    name, out = sys.argv[1:]
    fd = bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", prog_id(name)))
    code = jited(fd)
    try:
        with open(out, "xb") as f:
            f.write(code)
    except FileExistsError:
        sys.exit(f"jit-dump: {out} exists: give a new file")
    print(f"{name}: {len(code)} bytes of JIT code in {out}")


if __name__ == "__main__":
    main()
