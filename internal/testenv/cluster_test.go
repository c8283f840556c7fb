package testenv

import (
	"strings"
	"testing"
)

// TestRedisCluster: three masters share all 16384 slots, and every node is
// stopped when the test that started them ends.
func TestRedisCluster(t *testing.T) {
	var addrs []string
	t.Run("start", func(t *testing.T) {
		addrs = StartRedisCluster(t, 3).Addrs()
		if len(addrs) != 3 {
			t.Fatalf("Addrs = %v, want 3", addrs)
		}
		for _, a := range addrs {
			info, err := clusterInfo(a)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3", "cluster_size:3"} {
				if !strings.Contains(info, want+"\r\n") {
					t.Fatalf("%s: CLUSTER INFO lacks %s:\n%s", a, want, info)
				}
			}
		}
	})
	for _, a := range addrs {
		if ping(a) {
			t.Fatalf("%s still answers after its test ended", a)
		}
	}
}
