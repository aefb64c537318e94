import re,sys
txt=open(sys.argv[1]).read()
blocks=re.split(r'\n  (?=void )',txt)
for b in blocks[1:]:
    head=b.split('\n')[0]
    name=re.sub(r'\(sgkc_\w+\)|, Context.*','',head)
    def g(k):
        m=re.search(r'\n\s+'+re.escape(k)+r'\s+\S+\s+([\d.,]+)',b)
        return m.group(1) if m else '-'
    stalls=re.findall(r'Stall ([A-Za-z ]+?)\s+inst\s+([\d.]+)',b)
    stalls=sorted({s:float(v) for s,v in stalls}.items(),key=lambda x:-x[1])[:5]
    m=re.search(r'Duration\s+(\S+)\s+([\d.,]+)',b)
    print(f"{name[:72]:72s} {m.group(2) if m else '-':>8}{m.group(1) if m else ''} issue% {g('Issue Slots Busy'):>6} cpi {g('Warp Cycles Per Issued Instruction'):>6} occ {g('Achieved Occupancy'):>6}")
    print("      ", ", ".join(f"{s}:{v}" for s,v in stalls))
