"""Top SASS instructions of one kernel by warp-stall samples, from
`ncu --page source --csv --print-source sass` (dev/run_h200.sh hot), then
per opcode: instructions executed and the L1 work they cost (shared-memory
wavefronts, ideal and actual, and global tag requests), the totals that
say whether the L1/shared pipe or issue bounds a kernel."""
import csv, sys

rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Source" in c for c in r)), None)
if head is None:
    print("no source table in", sys.argv[1]); sys.exit(0)
cols = rows[head]
print("columns:", " | ".join(cols)[:600])
def col(name):
    return next((i for i, c in enumerate(cols) if name in c), None)
src, samp = col("Source"), col("Warp Stall Sampling (All")
if samp is None:
    samp = col("Sampling")
addr = col("Address")
body = [r for r in rows[head + 1:] if len(r) == len(cols)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[samp]) for r in body) or 1
print(f"{len(body)} instructions, {tot:.0f} samples")
for r in sorted(body, key=lambda r: -num(r[samp]))[:45]:
    print(f"{num(r[samp]):6.0f} {100*num(r[samp])/tot:5.1f}%  {r[addr] if addr is not None else ''}  {r[src][:110]}")

# Per opcode, then memory instructions grouped by their cost an
# instruction: shared-memory wavefronts (an LDS.128 takes 4, or 2 where
# lanes t and t ^ 1 share its address) and global tag requests (one per
# 128-byte line a warp touches). Columns by exact name: "Instructions
# Executed" is also part of "Thread Instructions Executed", and "L1
# Wavefronts Shared" of its "Excessive" and "Ideal" columns.
def exact(name):
    return next((i for i, c in enumerate(cols) if c.strip() == name), None)
names = ["Instructions Executed", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal", "L1 Tag Requests Global"]
idx = [exact(c) for c in names]
if None in idx:
    sys.exit(0)
ops, grp = {}, {}
for r in body:
    words = [w for w in r[src].split() if not w.startswith("@")]
    if not words:
        continue
    parts = words[0].split(".")
    op = parts[0] + ("." + parts[-1] if parts[-1] in ("128", "64") else "")
    v = [num(r[i]) for i in idx]
    t = ops.setdefault(op, [0.0] * len(v))
    for k in range(len(v)):
        t[k] += v[k]
    ie, wf, _, tg = v
    if ie and words[0].startswith(("LDS", "LDG", "STS", "STG", "LDL", "STL")):
        g = grp.setdefault((words[0], round(wf / ie, 2), round(tg / ie, 2)), [0, 0.0, 0.0, 0.0])
        g[0] += 1; g[1] += ie; g[2] += wf; g[3] += tg
print("\nper opcode: " + " | ".join(names))
print("TOTAL      " + " ".join(f"{sum(t[k] for t in ops.values()):14.0f}" for k in range(len(names))))
for op, t in sorted(ops.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:25]:
    print(f"{op:10s} " + " ".join(f"{v:14.0f}" for v in t))
print("\nmemory instructions by cost: opcode | wavefronts/inst | tag requests/inst | SASS lines | executed | wavefronts | tag requests")
for k, g in sorted(grp.items(), key=lambda kv: -(kv[1][2] + kv[1][3]))[:16]:
    print(f"{k[0]:24s} {k[1]:6} {k[2]:7} {g[0]:5d} {g[1]:11.0f} {g[2]:11.0f} {g[3]:10.0f}")
