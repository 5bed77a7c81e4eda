#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw agent-bench's p99 turn latency against the number of agents.

    bench/agent_plot.py [JSONL] [-o PNG]

Reads the JSON lines bench/agent-bench.c writes (a file, or stdin for -
or no argument) and draws, per memory policy, the p99 per-turn latency
of each run against its number of agents N, with the SLO (2 x the p99
turn latency of one agent alone) as a horizontal line. A run that failed
otherwise (an agent refused, failed, or decoded other tokens than alone)
is drawn hollow; the legend gives each policy's agent density. Writes a
PNG (default Documentation/sched-density.png). Needs matplotlib.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {'semantic': 'tab:blue', 'lru': 'tab:orange', 'static': 'tab:green'}


def read(f):
    """The runs, the SLO and the densities in the lines of @f."""
    runs = {}  # (policy, agents) -> {metric: line}
    slo = None
    density = {}
    bench = None
    for line in f:
        line = line.strip()
        if not line.startswith('{'):
            continue
        j = json.loads(line)
        bench = bench or j.get('bench')
        m = j.get('metric')
        if m == 'slo_turn_latency':
            slo = j['value']
        elif m == 'agent_density':
            density[j['policy']] = j
        elif 'policy' in j and 'agents' in j:
            runs.setdefault((j['policy'], j['agents']), {})[m] = j
    return bench, runs, slo, density


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('jsonl', nargs='?', default='-')
    p.add_argument('-o', '--out', default='Documentation/sched-density.png')
    a = p.parse_args()
    if a.jsonl == '-':
        bench, runs, slo, density = read(sys.stdin)
    else:
        with open(a.jsonl) as f:
            bench, runs, slo, density = read(f)
    policies = sorted({pol for pol, _ in runs},
                      key=lambda x: list(COLOURS).index(x)
                      if x in COLOURS else len(COLOURS))
    if not policies:
        sys.exit('agent_plot.py: no runs in %s' % a.jsonl)

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for pol in policies:
        pts = sorted((n, r) for (q, n), r in runs.items() if q == pol)
        xs, ys, ok = [], [], []
        for n, r in pts:
            p99 = r.get('turn_latency_p99', {}).get('value')
            if p99 is None:
                continue
            refused = r.get('refusals', {}).get('value') or 0
            eq = r.get('tokens_equal', {})
            xs.append(n)
            ys.append(p99)
            ok.append(not refused and eq.get('value') is not None and
                      eq.get('value') == eq.get('limit'))
        label = pol
        d = density.get(pol)
        if d is not None:
            label += ' (density %s%s)' % (
                d['value'], '+' if 'lower bound' in d.get('note', '') else '')
        c = COLOURS.get(pol)
        line, = ax.plot(xs, ys, '-', color=c, label=label)
        c = line.get_color()
        ax.scatter([x for x, k in zip(xs, ok) if k],
                   [y for y, k in zip(ys, ok) if k], color=c, zorder=3)
        ax.scatter([x for x, k in zip(xs, ok) if not k],
                   [y for y, k in zip(ys, ok) if not k], facecolors='none',
                   edgecolors=c, zorder=3)
    if slo is not None:
        ax.axhline(slo, color='tab:red', linestyle='--',
                   label='SLO %.0f ms (2 x p99 alone)' % slo)
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    ax.set_xlabel("agents live at once (N)")
    ax.set_ylabel('p99 turn latency (ms)')
    ax.set_title('%s: p99 turn latency by memory policy\n'
                 '(hollow: refusals, failures or tokens unlike alone)'
                 % (bench or 'agent'), fontsize=10)
    ns = sorted({n for _, n in runs})
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter('%g'))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter('%g'))
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out)
    print('agent_plot.py: wrote %s' % a.out, file=sys.stderr)


if __name__ == '__main__':
    main()
