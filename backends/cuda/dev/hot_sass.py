"""Top SASS instructions of one kernel by warp-stall samples, from
`ncu --page source --csv --print-source sass` (dev/run_h200.sh hot)."""
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
