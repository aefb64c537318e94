#!/usr/bin/env python3
"""Writes the starting corpus of fuzz_api (the seed-* inputs): short
programs in fuzz_api.c's input format, one per kind of call, from which
libFuzzer mutates; and moves a corpus between folder and packed form
(tests/fuzz/corpus.txt: a line per input, its name and its bytes in hex).

usage: make_seeds.py DIR                 write the seeds into DIR
       make_seeds.py --unpack FILE DIR   write each input of a packed corpus into DIR
       make_seeds.py --pack DIR FILE     pack every file of DIR into FILE"""
import os
import sys

SEED = bytes(range(1, 9))  # eight bytes of rng seed


def ctx(slot=0, threads=1):
    return bytes([0, 0, slot, 1 | (threads << 2)])


def layer(slot=0, c=0, h=1, d=1, p=2, eps=0):
    return bytes([2, 10, slot, c, eps, h, d, p, 0]) + SEED


def wild_layer(d_pick=4, h_pick=0, p_pick=0):
    # mode >= 200; D, H, P from the wild table; eps, dtype, struct_size, null weight
    return bytes([2, 210, 1, 0, 0, 1, d_pick, 1, h_pick, 0, 0, 0, 2, 0]) + SEED


def forward(device=False, B=1, N=2, mask=0, ptr=0x28, ws=0, mask_bits=None, poison=0):
    op = 11 if device else 15
    body = bytes([op, 0, 0, B, N, mask, ptr]) + (bytes([ws]) if device else b"") + SEED
    if mask_bits is None:
        return body + bytes([0, poison])
    return body + bytes([200]) + mask_bits + bytes([poison])


def set_weights(device=False, mode=0, e=0, x=0):
    # slot 0; mode picks what is wrong (0: nothing); e < 160 keeps the layer's eps
    return bytes([17 if device else 16, 0, mode, e]) + SEED + bytes([x])


def train(B=1, N=3, mask=0, fault=0, wanted=0, poison=0):
    # slot 0; B = 1 + B % 2, N = 1 + N % 4; fault picks what is wrong in the backward
    return bytes([18, 0, B, N, mask, fault, wanted]) + SEED + bytes([0, poison])


def end():
    return bytes([0, 1, 1, 1])


def seeds():
    base = ctx() + layer()
    yield "basic", base + forward() + forward(device=True, B=0, N=3, mask=130) + \
        set_weights() + forward() + set_weights(device=True) + forward(device=True) + \
        set_weights(mode=1) + set_weights(device=True, e=200) + end()
    yield "variants", base + bytes([7, 0, 0]) + forward() + bytes([7, 0, 1]) + \
        forward(device=True) + bytes([7, 0, 100]) + forward() + end()
    yield "queries", base + bytes([8, 0, 2, 3, 0, 8, 0, 1, 1, 1, 8, 0, 230, 7, 3, 2]) + end()
    yield "wild-sizes", base + bytes([15, 0, 0, 230, 4, 2, 0, 0x28]) + SEED + b"\0\0" + \
        bytes([8, 0, 230, 8, 1, 1, 2]) + end()
    yield "null-ptrs", base + forward(ptr=0x00) + forward(ptr=0x01) + forward(ptr=0x03) + end()
    yield "misaligned", base + forward(ptr=0x10) + forward(ptr=0x16, mask=130) + end()
    yield "aliasing", base + forward(ptr=0x20) + forward(ptr=0x24) + end()
    yield "workspace", base + forward(device=True, ws=1) + forward(device=True, ws=2) + end()
    yield "mask-bits", base + forward(B=0, N=1, mask=0, mask_bits=bytes([0x7f, 0xc0, 0x80, 0, 0, 0,
                                                                          0x00, 0x01] * 4)) + end()
    yield "poison", base + forward(poison=240) + forward(poison=243) + end()
    yield "faults", ctx() + bytes([0x82, 2]) + layer()[1:] + bytes([0x8f, 1]) + \
        forward()[1:] + end()
    yield "orders", ctx(0) + ctx(1, 3)[0:0] + bytes([0, 0, 1, 9]) + layer(0, 0) + \
        layer(1, 1) + bytes([5, 0]) + forward() + bytes([6, 1]) + end()
    yield "registry", bytes([10, 0, 0, 10, 1, 3] + list(b"opencl\0") +
                            [10, 0x32, 1, 10, 3, 200, 10, 4, 1]) + ctx() + \
        bytes([10, 0x04, 2, 10, 0x05, 0]) + end()
    yield "bad-layers", ctx() + wild_layer(4) + wild_layer(5, 1) + wild_layer(0) + end()
    yield "train", base + train() + b"".join(train(N=f % 4, mask=f, fault=f) for f in range(1, 10)) + \
        train(B=1, wanted=0x5a) + train(poison=241) + bytes([0x92, 1]) + train()[1:] + \
        bytes([0x92, 3]) + train()[1:] + end()
    yield "bad-contexts", bytes([0, 3, 0, 0, 0, 0x36, 0xff, 0, 1, 0, 0, 0xc1, 0, 0, 0, 0xf1]) + end()


HEADER = """# The fuzz corpus of fuzz_api, one input a line: its name, then its bytes in hex.
# fuzz_replay runs this file; make_seeds.py --unpack writes the inputs out as files
# for libFuzzer, and --pack folds a corpus folder back into this form.
"""


def unpack(path, out):
    os.makedirs(out, exist_ok=True)
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, data = line.split()
                with open(os.path.join(out, name), "wb") as g:
                    g.write(bytes.fromhex(data))


def pack(folder, path):
    with open(path, "w") as f:
        f.write(HEADER)
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as g:
                f.write(f"{name} {g.read().hex()}\n")


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] in ("--unpack", "--pack"):
        (unpack if args[0] == "--unpack" else pack)(args[1], args[2])
        return
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit(__doc__)
    out = args[0]
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, "seed-" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
