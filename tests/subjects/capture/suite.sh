#!/bin/sh
# The subject's own test suite, as a project would have it: runs ./tool (built with
# trestle-cc in the current directory) in the ways suites do; exits 1 when a check fails.
fail=0
./tool data/a.txt > out1 2> err1 || fail=1
printf 'piped input\n' | ./tool > out2 || fail=1
TOOL_MODE=upper ./tool --file="$ABS_INPUT" > out3 || fail=1
./tool < data/a.txt | cat > out4 || fail=1
./tool data/a.txt > out1 2> err1 || fail=1
./tool missing.txt 2>/dev/null; test $? = 2 || fail=1
./tool < /dev/null > /dev/null 2>&1; test $? = 1 || fail=1
./tool data/big.txt > /dev/null 2>&1; test $? -gt 128 || fail=1
./tool --again data/a.txt > out5 || fail=1
./tool --fork data/a.txt data/b.txt > out6 || fail=1
./tool --now > out8 || fail=1
touch flag; ./tool --flag; test $? = 3 || fail=1; rm -f flag
mkdir -p outdir && ./tool --out=outdir/copy data/a.txt || fail=1
echo previous > appended; ./tool data/b.txt >> appended 2>&1 || fail=1
sleep 2 | timeout 1 ./tool; test $? = 124 || fail=1
mkfifo fifo; (printf 'through a fifo\n' > fifo &); ./tool fifo > out7 || fail=1; rm -f fifo
# A record left by a runtime of another version.
if [ -n "$TRESTLE_CAPTURE_DIR" ]; then
  d="$TRESTLE_CAPTURE_DIR/1-1"; mkdir -p "$d"
  printf 'format 99\nversion 9.9.9\nstatus exit 0\n' > "$d/process"; printf '/old/tool' > "$d/exe"
fi
echo "suite: fail=$fail"
exit $fail
