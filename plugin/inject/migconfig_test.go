package inject

import (
	"slices"
	"testing"
)

// A container asking NVIDIA's runtime for the MIG config capability (the
// DRA driver's kubelet plugin, with or without GPUs of its own) gets the
// node's live state writable, and the library is pointed at it; others,
// and a node without a live state, do not.
func TestMIGConfigContainersGetTheLiveStateWritable(t *testing.T) {
	node := testNode(8, false)
	node.State = "/var/lib/nvmock/live/state"
	want := Mount{Source: node.State, Destination: migConfigState, Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev"}}
	config := MIGConfigEnv + "=all"
	noState := node
	noState.State = ""
	for _, c := range []struct {
		name     string
		node     NodeState
		pod      Pod
		ctr      Container
		writable bool
	}{
		{"void, asking for the config capability (the DRA driver's plugin)", node, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void", config), true},
		{"given GPUs, asking for it", node, pod("ml", GPUsAnnotation, "1"), withEnv(ctr, config), true},
		{"given GPUs, not asking", node, pod("ml", GPUsAnnotation, "1"), ctr, false},
		{"asking for something else than all", node, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void", MIGConfigEnv+"=0"), false},
		{"naming its own state", node, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void", config, StateEnv+"=/mine"), false},
		{"on a node without a live state", noState, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void", config), false},
		{"in a namespace that did not opt in", node, pod("other"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void", config), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, _, err := Decide(testConfig, c.node, c.pod, c.ctr)
			if err != nil {
				t.Fatal(err)
			}
			got := slices.ContainsFunc(adj.Mounts, func(m Mount) bool {
				return m.Source == want.Source && m.Destination == want.Destination && slices.Equal(m.Options, want.Options)
			})
			env := slices.Contains(adj.Env, EnvVar{Key: StateEnv, Value: migConfigState})
			if got != c.writable || env != c.writable {
				t.Errorf("writable state mount %v, %s set %v; want %v (mounts %+v, env %+v)", got, StateEnv, env, c.writable, adj.Mounts, adj.Env)
			}
			for _, m := range adj.Mounts {
				if m.Destination != migConfigState && m.Source == node.State && slices.Contains(m.Options, "rw") {
					t.Errorf("the state is writable at %s too", m.Destination)
				}
			}
		})
	}
}
