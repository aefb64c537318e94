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

ops = {}
cols_l1 = [c for c in ("Instructions Executed", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal",
                       "L1 Tag Requests Global") if col(c) is not None]
# "Instructions Executed" also matches "Thread Instructions Executed": take the exact column
idx = {c: next(i for i, h in enumerate(cols) if h.strip() == c) if any(h.strip() == c for h in cols) else col(c)
       for c in cols_l1}
for r in body:
    op = r[src].split()
    op = [w for w in op if not w.startswith("@")]
    op = op[0].split(".")[0] + ("." + op[0].split(".")[-1] if op and op[0].split(".")[-1] in ("128", "64") else "") if op else "?"
    t = ops.setdefault(op, [0.0] * len(cols_l1))
    for k, c in enumerate(cols_l1):
        t[k] += num(r[idx[c]])
if cols_l1:
    tot_c = [sum(t[k] for t in ops.values()) for k in range(len(cols_l1))]
    print("\nper opcode: " + " | ".join(cols_l1))
    print("TOTAL      " + " ".join(f"{v:14.0f}" for v in tot_c))
    for op, t in sorted(ops.items(), key=lambda kv: -(kv[1][1] if len(kv[1]) > 1 else kv[1][0]))[:25]:
        print(f"{op:10s} " + " ".join(f"{v:14.0f}" for v in t))

# Memory instructions grouped by their cost an instruction: shared-memory
# wavefronts (an LDS.128 takes 4, or 2 where lanes t and t ^ 1 share its
# address) and global tag requests (one per 128-byte line a warp touches).
wfc, tgc, iec = col("L1 Wavefronts Shared"), col("L1 Tag Requests Global"), idx.get("Instructions Executed")
if wfc is not None and tgc is not None and iec is not None:
    # "L1 Wavefronts Shared" also matches "... Excessive" / "... Ideal": take the exact column
    wfc = next(i for i, h in enumerate(cols) if h.strip() == "L1 Wavefronts Shared")
    grp = {}
    for r in body:
        ie = num(r[iec])
        words = [w for w in r[src].split() if not w.startswith("@")]
        if ie == 0 or not words or not words[0].startswith(("LDS", "LDG", "STS", "STG", "LDL", "STL")):
            continue
        wf, tg = num(r[wfc]), num(r[tgc])
        g = grp.setdefault((words[0], round(wf / ie, 2), round(tg / ie, 2)), [0, 0.0, 0.0, 0.0])
        g[0] += 1; g[1] += ie; g[2] += wf; g[3] += tg
    print("\nmemory instructions by cost: opcode | wavefronts/inst | tag requests/inst | SASS lines | executed | wavefronts | tag requests")
    for k, g in sorted(grp.items(), key=lambda kv: -(kv[1][2] + kv[1][3]))[:16]:
        print(f"{k[0]:24s} {k[1]:6} {k[2]:7} {g[0]:5d} {g[1]:11.0f} {g[2]:11.0f} {g[3]:10.0f}")
