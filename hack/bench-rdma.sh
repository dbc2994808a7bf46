#!/bin/sh
# RC, UC and XRC traffic (and UCX over UD) between two programs on one mock node, through the verbs
# provider and the fabric daemon: run inside `nvmock exec --profile h100`
# by hack/bench.sh, which takes the medians of the lines it prints.
set -eu
pair() { # TOOL ARGS...: server and client on mlx5_0; prints the client's output
	t=$1; shift
	"$t" -d mlx5_0 "$@" >/dev/null 2>&1 &
	sleep 0.3
	"$t" -d mlx5_0 "$@" localhost
	wait
}
# Bandwidth tests: " #bytes #iterations peak average rate": the average.
pair ib_write_bw -n 2000 | awk '$1 == 65536 && NF == 5 { print "ib_write_bw_64KiB_MBps", $4 }'
pair ib_read_bw -n 2000 | awk '$1 == 65536 && NF == 5 { print "ib_read_bw_64KiB_MBps", $4 }'
# UC: unanswered, so the writer does not wait for the responder.
pair ib_write_bw -c UC -n 2000 | awk '$1 == 65536 && NF == 5 { print "ib_write_bw_uc_64KiB_MBps", $4 }'
# XRC: an initiator writing through a target, checked by its SRQ's PD.
pair ib_write_bw -c XRC -n 2000 | awk '$1 == 65536 && NF == 5 { print "ib_write_bw_xrc_64KiB_MBps", $4 }'
# Latency: "#bytes #iterations t_min t_max t_typical ...": the typical.
pair ib_send_lat -n 1000 | awk '$1 == 2 && $2 == 1000 { print "ib_send_lat_typical_us", $5 }'
# UCX: "Final: iterations overhead(3) bandwidth(2) rate(2)": the average bandwidth.
ucx() { # NAME TEST UCX_TLS PORT
	UCX_TLS=$3 UCX_NET_DEVICES=mlx5_0:1 ucx_perftest -t "$2" -n 1000 -s 65536 -p "$4" >/dev/null 2>&1 &
	sleep 1
	UCX_TLS=$3 UCX_NET_DEVICES=mlx5_0:1 ucx_perftest -t "$2" -n 1000 -s 65536 -p "$4" 127.0.0.1 |
		awk -v n="$1" '$1 == "Final:" { print n, $6 }'
	wait
}
ucx ucx_tag_bw_ud_64KiB_MBps tag_bw ud_verbs,self 18630
ucx ucx_tag_bw_rc_64KiB_MBps tag_bw rc_verbs,ud_verbs:aux,self 18631
# One-sided: RDMA writes (ucx_perftest's put test).
ucx ucx_put_bw_rc_64KiB_MBps ucp_put_bw rc_verbs,ud_verbs:aux,self 18632
