#!/usr/bin/env bash
# The GPU path on an offline GPU box that gets a copy of this tree without .git (rsync, a job
# system): install from the carried wheelhouse, build the source peers, run `make smoke` and
# `make test-gpu` one after the other, measure notebooks, and keep what they wrote.
#
#   scripts/offline_box.sh run   JOB COMMIT STEP...   # the steps, in the foreground
#   scripts/offline_box.sh start JOB COMMIT STEP...   # the same, detached (setsid): it outlives the shell
#   scripts/offline_box.sh wait  JOB SECONDS          # until the detached job ends (or SECONDS pass;
#                                                     # at once, exit 3, when no job is there or it died)
#   scripts/offline_box.sh pack  JOB DEST             # JOB's results as tarballs in DEST
#
# JOB is a folder outside the tree (its log, one line per step in JOB/summary, JOB/done at the
# end). COMMIT is the commit the copy holds: tables and figures name it (FP8LAB_GIT_COMMIT; a
# measuring step hides any .git the copy has, so provenance cannot come from elsewhere).
# Steps: env, setup, marlin, deepgemm, deepgemm-bindings, vllm-marlin, vllm-cutlass, vllm-quant, sglang-quant, gemlite-atomics
# (scripts/probes/gemlite_atomics.py), quant-probe (scripts/probes/quant.py), gemv-probe (scripts/probes/gemv.py:
# the decode kernels' schedules, plain and PDL; its table goes to JOB/probe_gemv.csv), w8a16-swapab
# (scripts/probes/w8a16_swapab.py: triton_w8a16's swapab path against the decode GEMV and cuBLAS BF16 at
# 08's shapes, M = 1..64; JOB/probe_w8a16_swapab.csv), gemv-ncu (scripts/probes/gemv_ncu.py: the FP8 decode GEMV,
# cuBLAS BF16, the stream and vLLM's FP8 Marlin under ncu at M = 1 and 16; JOB/gemv-ncu/), decode-ablate
# (scripts/probes/decode_ablate.py at M = 16 and M = 1, split-K at the chosen splits: the finalise orders,
# act_rep8, kstagger, w16res and the activation ablations; JOB/ablate-m16/, JOB/ablate-m1/), quant-ncu
# (scripts/probes/quant_ncu.py: the quantisers and SGLang's under ncu, --clock-control none; JOB/quant-ncu/),
# quant-pdl (scripts/probes/quant_pdl_overlap.py: quant_act_subwarp and SGLang's quantiser, plain and PDL, subwarp and
# the same-traffic copy with both PDL releases, one process), copy-floor (scripts/probes/copy_floor.py: 06b's
# small-M yardstick copy beside a kernel copy of the same bytes, a one-word fill, traffic_copy and the subwarp
# quantiser; JOB/copy-floor/), gemv-splits (scripts/probes/gemv.py: split-K pinned to 1-32 splits at nine
# shapes, M = 1-128, the sweep choose_splits is fitted to, JOB/gemv-splits/; then every schedule at M = 1 and
# 16 on the four shapes below 0.85 of copy, JOB/gemv-sched/), wgmma-bw (fp8lab's TMA + wgmma blockwise GEMM:
# its GPU tests, then scripts/probes/wgmma_blockwise.py against cuBLASLt, per-tensor FP8, CUTLASS and DeepGEMM at 05's shapes,
# M = 1024 / 4096 / 8192; JOB/wgmma-bw/), w8a8-gemv (fp8lab's W8A8 blockwise decode GEMV: its GPU tests, then
# scripts/probes/gemv_w8a8.py against triton_blockwise's small-M tiles and cuBLASLt at 05's shapes, M = 1-64;
# JOB/w8a8-gemv/), decode-pattern (scripts/probes/decode_pattern.py: the decode GEMVs' access patterns alone over
# split counts and CTAs per SM at notebook 08's shapes, beside the GEMVs; JOB/decode-pattern/), decode-3cta
# (scripts/probes/decode_ablate.py: the FP8 GEMV at three CTAs per SM, lb3 and the cp.async rings cpa3x3 /
# cpa4x3, at the chosen splits and 8 / 11 / 12 / 16, M = 1 and 16; JOB/decode-3cta-m1, -m16/), decode-rows
# (scripts/probes/decode_rows.py: a row-major CUDA-core FP8 GEMV of gemlite's shape over CTA configs at M = 1,
# then four configs at M = 2 and 4, beside gemv_w16 and cuBLAS BF16; JOB/decode-rows-m1, -m24/), decode-rows-int4
# (the same probe with --fmt int4: four CUDA-core dequants (magic, unit, h2, h2s) at M = 1 and h2 / h2s past fp16 range; JOB/decode-rows-int4/),
# smoke, test-gpu, proof (smoke and test-gpu side by side, every extension built once first), run (every
# notebook, measured), NN (one notebook measured, e.g. 05). A measuring step builds the source peers its
# notebooks run (Marlin and vLLM's Marlin: 04, 08, 11; DeepGEMM, vLLM's CUTLASS blockwise GEMM and vLLM's
# CUDA quantiser: 05, 06; vLLM's and SGLang's CUDA quantisers: 06b)
# first when no build of them is there.
# What a measuring step writes under data/ and figures/ is copied to JOB/keep right after it.
# `start` runs the steps in a snapshot of the tree (JOB/tree; runs/, wheelhouse/, .venv and .git
# left out; PYTHONPATH and FP8LAB_ROOT point there): a tool that copies the tree to the box again
# for its next command (the `wait` call) rewrites the tree's files while the job runs, and a
# notebook importing fp8lab at that moment failed (H200, 22c72ed: smoke's 10_clock_sweep,
# "cannot import name 'harness'", the second after the next call began). Step `setup` installs
# from the tree itself (an editable install from the snapshot would point at a folder the next
# `start` deletes); `pack` reads runs/ and build/peers/ from the snapshot when there is one. Peers a
# started job builds stay in its snapshot: build them in the tree first (`run JOB C marlin ...` or
# `make build`) and every later snapshot starts with them. Before
# carrying the tree: `make wheelhouse WHEEL_HAVE=<the box's pip freeze>` and
# `python scripts/peers_offline.py --wheels --sources`. A lent box that is handed back when idle
# (no command running for its idle-release time, whatever a detached job is doing) takes the job
# with it: follow `start` with `wait` calls back to back, nothing in between.
# Never changes clocks, power limits or GPU modes.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/offline_box.sh run|start JOB COMMIT STEP... | wait JOB SECONDS | pack JOB DEST" >&2; exit 2; }
[ $# -ge 2 ] || usage
verb=$1 job=$2; shift 2
MK=(WHEELHOUSE=wheelhouse EXTRAS=gpu-tools,test,peers VENV=)
STEPS="env setup marlin deepgemm deepgemm-bindings vllm-marlin vllm-cutlass vllm-quant sglang-quant gemlite-atomics quant-probe gemv-probe gemv-ncu w8a16-swapab decode-ablate quant-ncu quant-pdl copy-floor gemv-splits wgmma-bw w8a8-gemv decode-pattern decode-3cta decode-rows decode-rows-int4 smoke test-gpu proof run"

# the nine shapes of choose_splits' fit (scripts/probes/data/gemv_splits_h200.json)
SPLIT_SHAPES=llama3-70b:down_proj,llama3-70b:qkv,llama3-70b:o_proj,llama3-8b:down_proj,llama3-8b:gate_up,qwen3-8b:gate_up,qwen3-8b:down_proj,qwen3-8b:o_proj,deepseek-v3:dense_down

keep() {        # copy what a step wrote under tracked folders out of the tree
    mkdir -p "$job/keep"
    for d in "$@"; do [ -e "$d" ] && cp -r --parents "$d" "$job/keep/"; done
}

source_peers() {  # the peers built from source that a measuring step's notebooks run (a no-op when
                  # built already): left out, their rows would say not-run and replace measured ones
    local p
    for p in "$@"; do
        [ -n "$(find build/peers -maxdepth 4 -path "build/peers/$p*" -name '*.so' 2>/dev/null | head -1)" ] && continue
        echo "--- building $p first (the notebook runs it as a peer)"; step "$p" || echo "--- $p did not build: its rows will say why"
    done
}

step() {
    case "$1" in
        env) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
             python3 -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
             echo "commit $FP8LAB_GIT_COMMIT, $(nproc) cores" ;;
        setup) if [ -n "${FP8LAB_BOX_TREE:-}" ]; then      # a snapshot: install from the tree, then
                   make -C "$FP8LAB_BOX_TREE" setup "${MK[@]}" || return $?   # share its stamp (make
                   cp -p "$FP8LAB_BOX_TREE"/.fp8lab-installed-* . 2>/dev/null || true   # setup: done)
               else make setup "${MK[@]}"; fi ;;
        marlin) python3 -m fp8lab.peers build marlin ;;
        vllm-marlin) python3 -m fp8lab.peers build vllm-marlin ;;
        vllm-cutlass) python3 -m fp8lab.peers build vllm-cutlass ;;
        vllm-quant) python3 -m fp8lab.peers build vllm-quant ;;
        sglang-quant) python3 -m fp8lab.peers build sglang-quant ;;
        deepgemm) python3 -m fp8lab.peers build deepgemm
                  for f in build/peers/deepgemm*/probe-*.json; do [ -e "$f" ] && echo "$f: $(cat "$f")"; done ;;
        deepgemm-bindings) timeout 600 python3 scripts/probes/deepgemm_bindings.py --out "$job/ld" > "$job/deepgemm-bindings.log" 2>&1
                           local rc=$?; grep -v '^      e\.g\.' "$job/deepgemm-bindings.log" | head -60; rm -rf "$job/ld"; return $rc ;;
        quant-probe) timeout 400 python3 scripts/probes/quant.py > "$job/quant-probe.log" 2>&1
                     local rc=$?; tail -40 "$job/quant-probe.log"; return $rc ;;
        gemv-probe) timeout 500 python3 scripts/probes/gemv.py --out "$job" > "$job/gemv-probe.log" 2>&1
                    local rc=$?; tail -60 "$job/gemv-probe.log"; return $rc ;;
        gemv-ncu) source_peers vllm-marlin
                  timeout 500 python3 scripts/probes/gemv_ncu.py --out "$job/gemv-ncu" > "$job/gemv-ncu.log" 2>&1
                  local rc=$?; tail -30 "$job/gemv-ncu.log"; return $rc ;;
        w8a16-swapab) timeout 500 python3 scripts/probes/w8a16_swapab.py --out "$job" > "$job/w8a16-swapab.log" 2>&1
                      local rc=$?; tail -40 "$job/w8a16-swapab.log"; return $rc ;;
        decode-ablate) { timeout 240 python3 scripts/probes/decode_ablate.py --m 16 --splitk-only --out "$job/ablate-m16" \
                             --variants base,fin_onepass,fin_all,act_rep8,kstagger,w16res,no_act,no_bar \
                         && timeout 150 python3 scripts/probes/decode_ablate.py --m 1 --splitk-only --out "$job/ablate-m1" \
                             --variants base,fin_onepass,kstagger; } > "$job/decode-ablate.log" 2>&1
                       local rc=$?; grep -A12 "^fraction of the 2 GiB" "$job/decode-ablate.log"; return $rc ;;
        decode-3cta) { timeout 240 python3 scripts/probes/decode_ablate.py --m 1 --splitk-only --splits 8,11,12,16 \
                           --variants base,lb3,cpa3x3,cpa4x3 --out "$job/decode-3cta-m1" \
                       && timeout 240 python3 scripts/probes/decode_ablate.py --m 16 --splitk-only --splits 8,11,12,16 \
                           --variants base,lb3,cpa3x3,cpa4x3 --out "$job/decode-3cta-m16"; } > "$job/decode-3cta.log" 2>&1
                     local rc=$?; grep -A30 "^fraction of the 2 GiB" "$job/decode-3cta.log"; return $rc ;;
        decode-rows) { timeout 300 python3 scripts/probes/decode_rows.py --ms 1 --out "$job/decode-rows-m1" \
                           && timeout 200 python3 scripts/probes/decode_rows.py --ms 2,4 --configs 4x1x2,4x2x2,4x4x1,8x2x2 \
                               --out "$job/decode-rows-m24"; } > "$job/decode-rows.log" 2>&1
                     local rc=$?; grep -B2 -A12 "^fraction of the 2 GiB" "$job/decode-rows.log" | tail -40; return $rc ;;
        decode-rows-int4) timeout 300 python3 scripts/probes/decode_rows.py --fmt int4 --ms 1 \
                              --configs 4x4x1,4x8x1,4x4x2,8x4x1 --out "$job/decode-rows-int4" > "$job/decode-rows-int4.log" 2>&1
                          local rc=$?; grep -E "2\^18|FAILED" "$job/decode-rows-int4.log" | head -8
                          grep -A12 "^fraction of the 2 GiB" "$job/decode-rows-int4.log"; return $rc ;;
        quant-pdl) source_peers sglang-quant
                   timeout 300 python3 scripts/probes/quant_pdl_overlap.py > "$job/quant-pdl.log" 2>&1
                   local rc=$?; tail -30 "$job/quant-pdl.log"; return $rc ;;
        quant-ncu) source_peers sglang-quant
                   timeout 400 python3 scripts/probes/quant_ncu.py --out "$job/quant-ncu" > "$job/quant-ncu.log" 2>&1
                   local rc=$?; tail -30 "$job/quant-ncu.log"; return $rc ;;
        gemlite-atomics) timeout 300 python3 scripts/probes/gemlite_atomics.py > "$job/gemlite-atomics.log" 2>&1
                         local rc=$?; tail -12 "$job/gemlite-atomics.log"; return $rc ;;
        copy-floor) timeout 120 python3 scripts/probes/copy_floor.py --out "$job/copy-floor" > "$job/copy-floor.log" 2>&1
                    local rc=$?; tail -25 "$job/copy-floor.log"; return $rc ;;
        gemv-splits) { timeout 300 python3 scripts/probes/gemv.py --splitk-only --splits 1,2,3,4,5,6,7,8,9,10,12,16,24,32 \
                           --ms 1,4,16,64,128 --rep-ms 10 --out "$job/gemv-splits" --shapes "$SPLIT_SHAPES" \
                       && timeout 200 python3 scripts/probes/gemv.py --ms 1,16 --rep-ms 10 --out "$job/gemv-sched" \
                           --shapes qwen3-8b:gate_up,llama3-8b:gate_up,llama3-8b:down_proj,llama3-70b:qkv; } > "$job/gemv-splits.log" 2>&1
                     local rc=$?; grep -A34 "fraction of the 2 GiB copy per schedule" "$job/gemv-splits.log" | tail -34; return $rc ;;
        wgmma-bw) source_peers deepgemm
                  { timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_wgmma_blockwise.py \
                        && timeout 400 python3 scripts/probes/wgmma_blockwise.py --out "$job/wgmma-bw"; } > "$job/wgmma-bw.log" 2>&1
                  local rc=$?; tail -45 "$job/wgmma-bw.log"; return $rc ;;
        decode-pattern) timeout 500 python3 scripts/probes/decode_pattern.py --out "$job/decode-pattern" > "$job/decode-pattern.log" 2>&1
                        local rc=$?; tail -25 "$job/decode-pattern.log"; return $rc ;;
        w8a8-gemv) { timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gemv_w8a8.py \
                         && timeout 400 python3 scripts/probes/gemv_w8a8.py --out "$job/w8a8-gemv"; } > "$job/w8a8-gemv.log" 2>&1
                   local rc=$?; tail -30 "$job/w8a8-gemv.log"; return $rc ;;
        smoke) make smoke "${MK[@]}" > "$job/smoke.log" 2>&1; local rc=$?; tail -3 "$job/smoke.log"; return $rc ;;
        proof) # smoke and test-gpu side by side, to spend less of a lease's device time: every extension
               # built once first, then both with PREBUILD=no; smoke's timings go to runs/ only. A few GPU
               # tests bound the harness's own timings (tests/test_bench_gpu.py: a 4 KiB kernel under
               # 10 us), which smoke's kernels on the same GPU can break: tests that failed are run
               # again alone afterwards (pytest --lf, test-gpu-rerun.log), and that run decides
               make build "${MK[@]}" > "$job/build.log" 2>&1 || { tail -5 "$job/build.log"; return 1; }
               make test-gpu "${MK[@]}" PREBUILD=no > "$job/test-gpu.log" 2>&1 & local tg=$!
               make smoke "${MK[@]}" PREBUILD=no > "$job/smoke.log" 2>&1 & local sm=$!
               wait $tg; local rt=$?; wait $sm; local rs=$?
               echo "test-gpu rc=$rt:"; tail -3 "$job/test-gpu.log"; echo "smoke rc=$rs:"; tail -3 "$job/smoke.log"
               if [ $rt -ne 0 ]; then
                   make test-gpu "${MK[@]}" PREBUILD=no ARGS=--lf > "$job/test-gpu-rerun.log" 2>&1; rt=$?
                   echo "test-gpu, its failures again alone, rc=$rt:"; tail -3 "$job/test-gpu-rerun.log"
               fi
               return $(( rt > rs ? rt : rs )) ;;
        test-gpu) make test-gpu "${MK[@]}" > "$job/test-gpu.log" 2>&1; local rc=$?; tail -3 "$job/test-gpu.log"; return $rc ;;
        run) source_peers marlin vllm-marlin deepgemm vllm-cutlass vllm-quant sglang-quant
             GIT_DIR=/nonexistent python3 -m fp8lab run --mode measure --no-progress --out runs/measure-all
             local rc=$?; keep data figures; return $rc ;;
        [0-9][0-9]|[0-9][0-9][a-z])
             case "$1" in 04|08|11) source_peers marlin vllm-marlin ;; 05|06) source_peers deepgemm vllm-cutlass vllm-quant ;; 06b) source_peers vllm-quant sglang-quant ;; esac
             GIT_DIR=/nonexistent python3 -m fp8lab run --only "$1" --mode measure --no-progress --out "runs/measure-$1"
             local rc=$?; keep data/*/"$1"_* figures/*/"$1"_*; return $rc ;;
        *) echo "unknown step '$1' (steps: $STEPS, or a notebook id such as 05)" >&2; return 2 ;;
    esac
}

steps() {
    export FP8LAB_GIT_COMMIT=$1; shift
    export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    local s t0 rc worst=0
    for s in "$@"; do
        t0=$(date +%s); echo "=== step $s start $(date -u +%T)"
        step "$s"; rc=$?
        [ $rc -gt $worst ] && worst=$rc
        echo "=== step $s rc=$rc $(( $(date +%s) - t0 )) s"
        echo "$s rc=$rc $(( $(date +%s) - t0 ))s" >> "$job/summary"
    done
    echo "rc=$worst" > "$job/done"
    return $worst
}

case "$verb" in
    run|start)
        [ $# -ge 2 ] || usage
        for s in "${@:2}"; do          # a typo fails here, before anything runs
            case " $STEPS " in *" $s "*) ;; *) [[ $s =~ ^[0-9][0-9][a-z]?$ ]] || { echo "unknown step '$s' (steps: $STEPS, or a notebook id such as 05)" >&2; exit 2; } ;; esac
        done
        rm -rf "$job"; mkdir -p "$job"
        if [ "$verb" = run ]; then
            steps "$@" 2>&1 | tee "$job/log"; exit "${PIPESTATUS[0]}"
        fi
        mkdir -p "$job/tree"
        tar -C . --exclude=./runs --exclude=./wheelhouse --exclude=./.venv --exclude=./.git -cf - . \
            | tar -C "$job/tree" -xf - || { echo "could not copy the tree to $job/tree" >&2; exit 1; }
        FP8LAB_BOX_TREE="$(pwd)" FP8LAB_ROOT="$job/tree" PYTHONPATH="$job/tree${PYTHONPATH:+:$PYTHONPATH}" \
            setsid nohup "$job/tree/scripts/offline_box.sh" run-detached "$job" "$@" > "$job/log" 2>&1 < /dev/null &
        echo $! > "$job/pid"
        echo "started in $job (pid $!), in a snapshot of the tree: $job/tree" ;;
    run-detached) steps "$@" ;;
    wait)           # returns at once when there is nothing to wait for: no job there (a device lent
                    # afresh keeps nothing of the last one) or its process gone before it finished
        [ $# -eq 1 ] || usage
        if [ ! -f "$job/log" ]; then
            echo "no job in $job: nothing was started here (a fresh machine keeps no job of an earlier one)" >&2; exit 3
        fi
        t0=$(date +%s) gone=
        while [ ! -f "$job/done" ] && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do
            if [ -f "$job/pid" ] && ! kill -0 "$(cat "$job/pid")" 2>/dev/null && [ ! -f "$job/done" ]; then gone=1; break; fi
            sleep 5
        done
        if [ -f "$job/done" ]; then echo "done ($(cat "$job/done"))"
        elif [ -n "$gone" ]; then echo "stopped: the job's process $(cat "$job/pid") is gone and did not finish (steps done below)"
        else echo "running after $1 s"; fi
        cat "$job/summary" 2>/dev/null; tail -c 4000 "$job/log"
        [ -z "$gone" ] || exit 3 ;;
    pack)
        [ $# -eq 1 ] || usage
        mkdir -p "$1"
        cp "$job"/*.log "$1"/ 2>/dev/null
        [ -d "$job/keep" ] && tar czf "$1/keep.tgz" -C "$job/keep" .
        dest=$(cd "$1" && pwd)
        [ -d "$job/tree" ] && cd "$job/tree"            # a started job ran in its snapshot
        [ -d runs ] && tar czf "$dest/runs.tgz" --exclude='*.so' --exclude='*.cubin' runs
        ls build/peers/*/probe* build/peers/*/build_info.json >/dev/null 2>&1 && \
            tar czf "$dest/peers.tgz" build/peers/*/probe* build/peers/*/build_info.json
        ls -la "$dest" ;;
    *) usage ;;
esac
