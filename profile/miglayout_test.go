package profile

import (
	"strings"
	"testing"
)

func TestMIGLayoutsPartitionTheNamedGPUs(t *testing.T) {
	p, err := Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	m := p.Board.Modes.MIG
	for _, c := range []struct{ spec, want string }{
		{"all-1g.5gb", "0:1g.5gb*7 1:1g.5gb*7 2:1g.5gb*7"},
		{"all-balanced", "0:3g.20gb,2g.10gb,1g.5gb,1g.5gb 1:3g.20gb,2g.10gb,1g.5gb,1g.5gb 2:3g.20gb,2g.10gb,1g.5gb,1g.5gb"},
		{"all-enabled", "0:on 1:on 2:on"},
		{"0,2=1g.5gb*2,3g.20gb;1=all-disabled", "0:3g.20gb,1g.5gb,1g.5gb 1:off 2:3g.20gb,1g.5gb,1g.5gb"},
		{"1-2=7g.40gb", "0:- 1:7g.40gb 2:7g.40gb"},
		{"all=all-1g.5gb+me;1=1g.10gb", "0:1g.5gb+me 1:1g.10gb 2:1g.5gb+me"},
	} {
		l, err := ParseMIGLayout(c.spec, m, 3)
		if err != nil {
			t.Errorf("%s: %v", c.spec, err)
			continue
		}
		var got []string
		for i, g := range l.GPUs {
			s := strings.Join(g.Instances, ",")
			switch {
			case !g.Set:
				s = "-"
			case !g.Enabled:
				s = "off"
			case s == "":
				s = "on"
			case len(g.Instances) == 7 && g.Instances[0] == g.Instances[6]:
				s = g.Instances[0] + "*7"
			}
			got = append(got, string(rune('0'+i))+":"+s)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: %s, want %s", c.spec, strings.Join(got, " "), c.want)
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"0=1g.5gb*9", `"1g.5gb*9": the count is not 1 to 7`},
		{"x=all-1g.5gb", `GPU "x": not an index, list or range`},
		{"2-1=all-1g.5gb", `GPU "2-1": not an index, list or range`},
		{"0=all-1g.5gb;all-1g.5gb", `"all-1g.5gb" is not GPUS=ITEMS`},
		{"0=1g.6gb", `"1g.6gb": the board's profiles are`},
		{"0=all-balanced,1g.5gb", `"all-balanced,1g.5gb": a layout such as all-balanced stands alone`},
		{"0=3g.20gb*2;", "an empty group (a ; too many)"},
		{";;", "an empty group"},
		{"", `mig layout "": empty; give one such as all-balanced, or all-disabled`},
		{" ", "empty; give one"},
		{"all-disabled;2=all-balanced", `"all-disabled" is not GPUS=ITEMS: with several groups each names its GPUs, such as all=all-disabled`},
	} {
		if _, err := ParseMIGLayout(c.spec, m, 3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.spec, err, c.want)
		}
	}
	l4, _ := Builtin("l40s")
	if _, err := ParseMIGLayout("all-1g.5gb", l4.Board.Modes.MIG, 1); err == nil || !strings.Contains(err.Error(), "no MIG profiles") {
		t.Errorf("a board without MIG: %v", err)
	}
	// all-disabled asks nothing of a board without MIG: a layout shared by
	// pools of several boards.
	for _, spec := range []string{"all-disabled", "all=all-disabled", "0-1=all-disabled"} {
		if l, err := ParseMIGLayout(spec, l4.Board.Modes.MIG, 2); err != nil || len(l.GPUs) != 2 || l.GPUs[0].Set || l.GPUs[1].Set {
			t.Errorf("%s on a board without MIG: %+v, %v; want nothing set", spec, l, err)
		}
	}
	if _, err := ParseMIGLayout("0=all-disabled;1=all-1g.5gb", l4.Board.Modes.MIG, 2); err == nil || !strings.Contains(err.Error(), "no MIG profiles") {
		t.Errorf("a layout asking for instances on a board without MIG: %v", err)
	}
}
