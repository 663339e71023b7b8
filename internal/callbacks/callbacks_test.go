package callbacks

import "testing"

func TestSetAddAllCancel(t *testing.T) {
	var s Set[func() int]
	c1 := s.Add(func() int { return 1 })
	s.Add(func() int { return 2 })
	sum := 0
	for _, fn := range s.All() {
		sum += fn()
	}
	if sum != 3 {
		t.Fatalf("sum %d", sum)
	}
	c1()
	c1()
	if all := s.All(); len(all) != 1 || all[0]() != 2 {
		t.Fatalf("after cancel: %d callbacks", len(all))
	}
}
