#!/bin/bash
# The multi-GPU benchmarks against their own rgapsd (docs/BENCHMARKS.md,
# "Several GPUs and stream order", "Chained replication"): gpu-mbench --relay
# (the plugin's chain copy alone, per piece size and lanes, against a star),
# gpu-mbench --fanout (peer, replica, per-subscriber copies, replica from a
# loan, against one GPU) over G = 1, 2, 4 GPUs as there are, then NCCL
# broadcast to the same GPUs (tests/gpu/nccl_bcast.py, PyTorch), then
# gpu-mbench --stream-order. Pools on GPU 0 take messages up to 1 GiB.
# Environment: MBENCH_GPUS (1,2,4), MBENCH_SIZES, MBENCH_REPS, MBENCH_PARTS
# (relay,fanout,nccl,stream), MBENCH_SCHEMES (peer,replica,copy,replica-loan),
# MBENCH_PIECES and MBENCH_LANES (relay: 1MiB,2MiB,4MiB,8MiB,16MiB,32MiB and
# 1,2), MBENCH_GPU_PIECE (the replicate topic's gpu_piece). Skips (77)
# without a GPU.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_mbench.sh
. "$(dirname "$0")/../integration/lib.sh"
MB="$RGAPS_BUILD/tests/gpu/gpu-mbench"
[ -x "$MB" ] || skip "$MB not built (no nvcc at configure time)"
require "a GPU" "$RGAPS_BUILD/tests/gpu/gpu-pub" --probe
GPUS=${MBENCH_GPUS:-1,2,4}
SIZES=${MBENCH_SIZES:-4MiB,64MiB,1GiB}
REPS=${MBENCH_REPS:-20,10,5}
PARTS=${MBENCH_PARTS:-relay,fanout,nccl,stream}
SCHEMES=${MBENCH_SCHEMES:-peer,replica,copy,replica-loan}

mkdir -p "$T/topics.d"
echo '{ "topics_dir": "topics.d" }' >"$T/rgapsd.json"
for t in mbpeer:peer mbrep:replicate mbso:auto; do
	printf '{ "memory": "cuda", "device": 0, "pool_size": "3GiB", "max_message_size": "1GiB", "queue_depth": 16, "block_timeout_ms": 20000, "gpu_fanout": "%s"%s }\n' \
		"${t#*:}" "${MBENCH_GPU_PIECE:+, \"gpu_piece\": \"$MBENCH_GPU_PIECE\"}" >"$T/topics.d/${t%%:*}.json"
done
case ",$PARTS," in *,relay,*)
	RGAPS_PLUGIN_DIR="$RGAPS_BUILD/plugins" timeout -k 5 "${RELAY_TIMEOUT:-120}" "$MB" --relay \
		--gpus "$GPUS" --sizes "${MBENCH_RELAY_SIZES:-64MiB,1GiB}" --reps "${MBENCH_RELAY_REPS:-10,5}" \
		--pieces "${MBENCH_PIECES:-1MiB,2MiB,4MiB,8MiB,16MiB,32MiB}" --lanes "${MBENCH_LANES:-1,2}" || exit $?
	;;
esac
case ",$PARTS," in *,fanout,*|*,nccl,*|*,stream,*) ;; *) exit 0 ;; esac
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
rc=0
case ",$PARTS," in *,fanout,*)
	timeout -k 5 "${FANOUT_TIMEOUT:-300}" "$MB" --fanout --topic-peer mbpeer --topic-rep mbrep \
		--gpus "$GPUS" --sizes "$SIZES" --reps "$REPS" --schemes "$SCHEMES" || rc=$?
	grep -h "topic 'mb.*': GPU\|replicator for GPU\|replicas fed\|GPU-to-GPU relays" "$T/rgapsd.log" |
		sed 's/^.*info: /rgapsd: /'
	;;
esac
case ",$PARTS," in *,nccl,*)
	if command -v python3 >/dev/null; then
		NCCL_NVLS_ENABLE=0 timeout -k 5 "${NCCL_TIMEOUT:-240}" python3 "$(dirname "$0")/nccl_bcast.py" \
			--gpus "$GPUS" --sizes "$SIZES" --reps "$REPS"
		r=$?; [ $r = 0 ] || [ $r = 77 ] || rc=$r
	else
		echo "SKIP nccl: no python3"
	fi
	;;
esac
case ",$PARTS," in *,stream,*)
	# Without producer work (bound by the host round trip), then with 1 ms of it.
	for w in 0 1000; do
		timeout -k 5 "${STREAM_TIMEOUT:-180}" "$MB" --stream-order --topic mbso \
			--sizes 4MiB,64MiB --reps 60,40 --work-us $w || rc=$?
	done
	;;
esac
stop_daemon
exit $rc
