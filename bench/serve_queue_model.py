#!/usr/bin/env python3
"""A discrete-event model of the engine's steps under `sonde bench --mode serve`'s closed-loop
clients (bench/README.md, issue 27): what time to first token a scheduling policy can reach at a
given load, without running the model. Each step prefills at most `chunk` prompt tokens (whole
prompts first, then one chunk), then one decode forward over every running row. Costs are inputs,
not measurements: the defaults were calibrated on one run of the AMD EPYC host (a 256-token
prefill + 2 decode steps = 0.583 s; one-row decode 29 ms). Prints TTFT p50/p90 and tokens/s for
arrival order (fcfs) and shortest remaining first (srpt), several seeds and request counts.

usage: serve_queue_model.py
"""
import random, math, statistics, sys
def run(policy, skip=0, clients=16, reqs=32, chunk=256, pt=2.05e-3, d0=0.028, d1=0.0011, think=0.5, seed=1, plo=16,phi=512,glo=16,ghi=256):
    rnd=random.Random(seed)
    R=[(rnd.randint(plo,phi), rnd.randint(glo,ghi)) for _ in range(reqs)]
    th=[-think*math.log1p(-rnd.random()) for _ in range(reqs)]
    # client c sends requests c, c+clients, ...
    t=0.0; ready={} # req -> arrival time
    for c in range(min(clients,reqs)): ready[c]=th[c]
    active={} # req -> dict(left prompt, gen left, arrival, prompt_step)
    ttft={}; done=0; step=0; gen_tokens=0; skipped=0
    while done<reqs:
        for r,a in list(ready.items()):
            if a<=t: active[r]={'left':R[r][0],'gen':R[r][1],'arr':a,'ps':None,'dec':False}; del ready[r]
        if not active:
            t=min(ready.values()); continue
        pre=[r for r,s in active.items() if not s['dec']]
        dec=[r for r,s in active.items() if s['dec']]
        for r in pre:
            if active[r]['ps'] is None: active[r]['ps']=step
        if policy=='fcfs': pre.sort()
        else: pre.sort(key=lambda r:(active[r]['left']-(step-active[r]['ps'])*chunk, r))
        b=chunk; used=0; finished=[]
        for i,r in enumerate(pre):
            s=active[r]
            if s['left']<=b and s['left']==R[r][0]:
                b-=s['left']; used+=s['left']; s['left']=0; finished.append(r)
            else:
                n=min(s['left'],b); s['left']-=n; used+=n; b-=n
                if s['left']==0: finished.append(r)
                break
        tp=used*pt
        t+=tp
        for r in finished:
            ttft[r]=t-active[r]['arr']; active[r]['dec']=True; active[r]['gen']-=1; gen_tokens+=1
        # skip: decode forwards left out (at most that many in a row) while prompts wait
        pending=any(not s['dec'] for s in active.values())
        if dec and pending and skipped<skip:
            skipped+=1; dec=[]
        else: skipped=0
        if dec:
            t+=d0+d1*len(dec)
            for r in dec:
                s=active[r]; s['gen']-=1; gen_tokens+=1
        for r in list(active):
            s=active[r]
            if s['dec'] and s['gen']<=0:
                del active[r]; done+=1
                nxt=r+clients
                if nxt<reqs: ready[nxt]=t+th[nxt]
        step+=1
    v=sorted(ttft.values())
    return statistics.median(v), v[int(0.9*len(v))], gen_tokens/t


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", type=int, default=256, help="prompt tokens a step")
    ap.add_argument("--skip", type=int, default=0, help="decode forwards skipped in a row while prompts wait")
    ap.add_argument("--prompts", default="16:512")
    ap.add_argument("--gens", default="16:256")
    ap.add_argument("--think", type=float, default=0.5)
    a = ap.parse_args()
    plo, phi = map(int, a.prompts.split(":"))
    glo, ghi = map(int, a.gens.split(":"))
    ref = 256 * 2.05e-3 + 2 * 0.0291
    for pol in ["fcfs", "srpt"]:
        for reqs in [32, 64, 128]:
            r = [run(pol, skip=a.skip, chunk=a.chunk, reqs=reqs, seed=seed, think=a.think, plo=plo, phi=phi, glo=glo,
                     ghi=ghi) for seed in (1, 2, 3)]
            print(f"{pol} {reqs} requests: TTFT p50 {statistics.mean(x[0] for x in r):.3f} s, "
                  f"p90 {statistics.mean(x[1] for x in r):.3f} s, {statistics.mean(x[2] for x in r):.1f} tokens/s "
                  f"(reference {ref:.3f} s)")
