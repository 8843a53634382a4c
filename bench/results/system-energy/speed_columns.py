# The trestle and aflpp columns of bench/system_speed.py, by its own functions, for sed and kvshell.
import sys, json, statistics
sys.path.insert(0, '/work/main/bench')
import system_speed as ss
from pathlib import Path
work = Path('/work/runs/speed')
out = {}
for s in ['kvshell', 'sed']:
    tprog = ss.build(s, str(ss.RELEASE / 'trestle-cc'), work, 'trestle')
    aprog = ss.build(s, 'afl-clang-fast', work, 'afl')
    for rep in range(3):
        t = ss.run_trestle(tprog, s, 60, work, [])
        a = ss.run_afl(aprog, s, 60, work, rep)
        out.setdefault(s, []).append((t['execs_per_sec'], a['execs_per_sec'], t.get('build')))
        print(s, rep, round(t['execs_per_sec']), round(a['execs_per_sec']), t.get('build'), flush=True)
for s, v in out.items():
    tm = statistics.median(x[0] for x in v); am = statistics.median(x[1] for x in v)
    print(s, 'trestle', round(tm), 'aflpp', round(am), 'ratio', round(tm / am, 2))
json.dump(out, open('/work/runs/ab/speed.json', 'w'))
