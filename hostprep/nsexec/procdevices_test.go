package nsexec

import "testing"

func TestMergeDevicesPutsTheOverlaysMajorsInTheKernelsOrder(t *testing.T) {
	kernel := "Character devices:\n  1 mem\n195 nvidia-frontend\n226 drm\n\nBlock devices:\n  7 loop\n"
	ours := "Character devices:\n195 nvidia-frontend\n195 nvidiactl\n509 nvidia-caps\n\nBlock devices:\n"
	got, err := mergeDevices(kernel, ours)
	if err != nil {
		t.Fatal(err)
	}
	want := "Character devices:\n  1 mem\n195 nvidia-frontend\n195 nvidiactl\n226 drm\n509 nvidia-caps\n\nBlock devices:\n  7 loop\n"
	if got != want {
		t.Errorf("merged:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{"", "Block devices:\n", "Character devices:\nx y\n\n", "Character devices:\n  1 mem"} {
		if _, err := mergeDevices(bad, ours); err == nil {
			t.Errorf("kernel text %q merged", bad)
		}
	}
}
