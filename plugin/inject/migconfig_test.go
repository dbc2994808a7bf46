package inject

import (
	"slices"
	"strings"
	"testing"
)

// A privileged container asking NVIDIA's runtime for the MIG config
// capability (the DRA driver's kubelet plugin, with or without GPUs of its
// own) gets the node's live state writable, and the library is pointed at
// it; others, and a node without a live state, do not. A request refused
// says why (NVIDIA's runtime refuses it to an unprivileged container:
// review, any container could change the node's layout).
func TestMIGConfigContainersGetTheLiveStateWritable(t *testing.T) {
	node := testNode(8, false)
	node.State = "/var/lib/nvmock/live/state"
	want := Mount{Source: node.State, Destination: migConfigState, Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev"}}
	config := MIGConfigEnv + "=all"
	noState := node
	noState.State = ""
	priv := ctr
	priv.Privileged = true
	for _, c := range []struct {
		name     string
		node     NodeState
		pod      Pod
		ctr      Container
		writable bool
		warning  string
	}{
		{"void, asking for the config capability (the DRA driver's plugin)", node, pod("ml"), withEnv(priv, "NVIDIA_VISIBLE_DEVICES=void", config), true, ""},
		{"given GPUs, asking for it", node, pod("ml", GPUsAnnotation, "1"), withEnv(priv, config), true, ""},
		{"all in another case", node, pod("ml", GPUsAnnotation, "1"), withEnv(priv, MIGConfigEnv+"=ALL"), true, ""},
		{"given GPUs, not asking", node, pod("ml", GPUsAnnotation, "1"), priv, false, ""},
		{"not privileged", node, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void", config), false, "in a container that is not privileged"},
		{"not privileged, given GPUs", node, pod("ml", GPUsAnnotation, "1"), withEnv(ctr, config), false, "in a container that is not privileged"},
		{"asking for something else than all", node, pod("ml"), withEnv(priv, "NVIDIA_VISIBLE_DEVICES=void", MIGConfigEnv+"=0"), false, `NVIDIA_MIG_CONFIG_DEVICES="0": only all is supported`},
		{"naming its own state", node, pod("ml"), withEnv(priv, "NVIDIA_VISIBLE_DEVICES=void", config, StateEnv+"=/mine"), false, ""},
		{"on a node without a live state", noState, pod("ml"), withEnv(priv, "NVIDIA_VISIBLE_DEVICES=void", config), false, ""},
		{"in a namespace that did not opt in", node, pod("other"), withEnv(priv, "NVIDIA_VISIBLE_DEVICES=void", config), false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, _, err := Decide(testConfig, c.node, c.pod, c.ctr)
			if err != nil {
				t.Fatal(err)
			}
			if warned := strings.Join(adj.Warnings, "\n"); c.warning == "" && warned != "" || !strings.Contains(warned, c.warning) {
				t.Errorf("warnings %q, want one with %q", adj.Warnings, c.warning)
			}
			got := slices.ContainsFunc(adj.Mounts, func(m Mount) bool {
				return m.Source == want.Source && m.Destination == want.Destination && slices.Equal(m.Options, want.Options)
			})
			env := slices.Contains(adj.Env, EnvVar{Key: StateEnv, Value: migConfigState})
			if got != c.writable || env != c.writable {
				t.Errorf("writable state mount %v, %s set %v; want %v (mounts %+v, env %+v)", got, StateEnv, env, c.writable, adj.Mounts, adj.Env)
			}
			// Elsewhere the state is writable for a privileged container
			// only (TestOnlyAPrivilegedContainerGetsTheStateWritable).
			for _, m := range adj.Mounts {
				if m.Destination != migConfigState && m.Source == node.State && slices.Contains(m.Options, "rw") != c.ctr.Privileged {
					t.Errorf("the state at %s: %v, for a container privileged %v", m.Destination, m.Options, c.ctr.Privileged)
				}
			}
		})
	}
}
