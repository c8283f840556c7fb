package cache

import "testing"

func TestGuardNumbers(t *testing.T) {
	g := Guards{Numbers: true}
	tests := []struct {
		query, candidate string
		allow            bool
	}{
		{"What is 12*7", "What is 12*8", false},
		{"What is 12*7", "what's 12 * 7 ?", true},
		{"add 12 and 7", "add 7 and 12", true},
		{"add 12 and 7", "add 12 and 7 and 7", false},
		{"sum of 12 and 7", "sum of 127", false},
		{"pi to 3.14", "pi to 3.15", false},
		{"bond 007", "bond 7", false},
		{"no numbers here", "none here either", true},
		{"top 10 films", "top films", false},
		{"top １０ films", "top 10 films", true}, // full-width digits
		{"第１２章", "第13章", false},
		{"十二乘以七等于几", "12乘以7等于几", true},
		{"十二乘以七等于几", "12乘以8等于几", false},
		{"三百零五", "305", true},
		{"一百一十", "110", true},
		{"两万块钱", "20000块钱", true},
		{"一亿二千万", "120000000", true},
		{"十二万三千四百五十六", "123456", true},
		{"二零二四年的电影", "2024年的电影", true},
		{"二零二四年的电影", "2023年的电影", false},
		{"一个苹果", "两个苹果", false},
		{"一个苹果", "个苹果", true}, // a lone 一 is the article "a"
		{"请问一下怎么做", "请问怎么做", true},
		{"第一章", "第三章", false},
		{"百度怎么用", "怎么用百度", true},
		{"百度知道", "知道", true},
		{"十分感谢", "谢谢", true},  // 十分 = very
		{"十分钟", "10分钟", true}, // but 十分钟 = ten minutes
		{"十分钟", "二十分钟", false},
		{"万一下雨怎么办", "下雨怎么办", true},
		{"三月五号", "五月三号", true}, // same multiset: the guard cannot see order
		{"三四百", "三四百", true},   // malformed runs still compare equal as written
		{"三四百", "三五百", false},
	}
	for _, tc := range tests {
		ok, reason := GuardsAllow(g, tc.query, tc.candidate)
		if ok != tc.allow {
			t.Errorf("GuardsAllow(%q, %q) = %v, want %v", tc.query, tc.candidate, ok, tc.allow)
		}
		if !ok && reason != GuardNumbers {
			t.Errorf("GuardsAllow(%q, %q) reason = %q, want %q", tc.query, tc.candidate, reason, GuardNumbers)
		}
		if ok && reason != "" {
			t.Errorf("GuardsAllow(%q, %q) allowed with reason %q", tc.query, tc.candidate, reason)
		}
		// The guard is symmetric.
		if back, _ := GuardsAllow(g, tc.candidate, tc.query); back != ok {
			t.Errorf("GuardsAllow not symmetric for %q, %q", tc.query, tc.candidate)
		}
	}
}

func TestGuardNegation(t *testing.T) {
	g := Guards{Negation: true}
	tests := []struct {
		query, candidate string
		allow            bool
	}{
		{"Is Python slow?", "Is Python not slow?", false},
		{"Why does my code work", "Why doesn't my code work", false},
		{"Why does my code not work", "Why doesn't my code work", true},
		{"why DOESN’T it work", "why does it NOT work", true}, // curly apostrophe, case
		{"I can do it", "I cannot do it", false},
		{"I can do it", "I can't do it", false},
		{"I can do it", "I cant do it", false},
		{"coffee with sugar", "coffee without sugar", false},
		{"is there a way", "is there no way", false},
		{"never give up", "always give up", false},
		{"neither this nor that", "this and that", false},
		{"it is not not true", "it is not true", false}, // counts, not presence
		{"notebook prices", "notebook cost", true},      // word boundaries
		{"know nothing", "know something", false},
		{"nobody came", "everybody came", false},
		{"none of them", "all of them", false},
		{"the answer is 'no'", "the answer is 'yes'", false},
		{"Snow in Norway", "snow in norway?", true},
		{"这个好吃吗", "这个不好吃吗", false},
		{"我有钱", "我没有钱", false},
		{"别去那里", "去那里", false},
		{"这是非法的", "这是合法的", false},
		{"无糖可乐", "可乐", false},
		{"未婚证明怎么开", "结婚证明怎么开", false},
		{"请勿吸烟", "请吸烟", false},
		{"是不是真的", "是真的吗", true}, // A-not-A question
		{"有没有好看的小说", "求好看的小说", true},
		{"可不可以退款", "可以退款吗", true},
		{"人和畜生的区别是什么", "人与畜生的差别是什么", true},
		{"这部电影非常好看", "这部电影很好看", true},
		{"这个手机不错", "这个手机很好", true},
		{"不过我想知道", "我想知道", true},
		{"无论如何都要去", "一定要去", true},
		{"未来的手机", "将来的手机", true},
		{"别人的东西", "他人的东西", true},
		{"差不多多少钱", "大概多少钱", true},
		{"植物大战僵尸好玩不？", "植物大战僵尸好玩吗？", true}, // question particle
		{"有什么好的英语学习网站没", "有什么好的英语学习网站吗", true},
		{"短道速滑和速度滑冰有什么不同？", "短道速滑和速度滑冰有什么区别", true},
		{"这两个颜色不同", "这两个颜色相同", false},
		{"Why does the server not start when the disk is full?", "Why does the server start when the disk is not full?", false}, // moved
		{"为什么不下雨的时候会打雷", "为什么下雨的时候不会打雷", false},
		{"淘宝新店没有流量怎么办？", "淘宝新店没流量怎么办？", true},
		{"it does not work", "does it not work", true},
	}
	for _, tc := range tests {
		ok, reason := GuardsAllow(g, tc.query, tc.candidate)
		if ok != tc.allow {
			t.Errorf("GuardsAllow(%q, %q) = %v, want %v", tc.query, tc.candidate, ok, tc.allow)
		}
		if !ok && reason != GuardNegation {
			t.Errorf("GuardsAllow(%q, %q) reason = %q, want %q", tc.query, tc.candidate, reason, GuardNegation)
		}
		if back, _ := GuardsAllow(g, tc.candidate, tc.query); back != ok {
			t.Errorf("GuardsAllow not symmetric for %q, %q", tc.query, tc.candidate)
		}
	}
}

func TestGuardsOffAndDefaults(t *testing.T) {
	if ok, reason := GuardsAllow(Guards{}, "what is 1+1", "what is not 2+2"); !ok || reason != "" {
		t.Errorf("guards off: got %v %q, want allowed", ok, reason)
	}
	g := DefaultGuards()
	if !g.Numbers || !g.Negation || !g.Order || !g.Entities {
		t.Fatalf("DefaultGuards() = %+v, want all on", g)
	}
	if ok, _ := GuardsAllow(g, "How do I sort a list in Go?", "how to sort a list in go"); !ok {
		t.Error("paraphrase without numbers or negation was rejected")
	}
	// Numbers are checked first.
	if _, reason := GuardsAllow(g, "is 5 prime", "is 6 not prime"); reason != GuardNumbers {
		t.Errorf("reason = %q, want %q", reason, GuardNumbers)
	}
	if _, reason := GuardsAllow(g, "is 5 prime", "is 5 not prime"); reason != GuardNegation {
		t.Errorf("reason = %q, want %q", reason, GuardNegation)
	}
}

func TestGuardOrder(t *testing.T) {
	g := Guards{Order: true}
	tests := []struct {
		query, candidate string
		allow            bool
	}{
		{"Is a dog bigger than a cat?", "Is a cat bigger than a dog?", false},
		{"Alice sent Bob a letter", "Bob sent Alice a letter", false},
		{"convert km to miles", "convert miles to km", false},
		{"张三打了李四", "李四打了张三", false},
		{"北京到上海的高铁", "上海到北京的高铁", false},
		{"三月五号", "五月三号", false},
		{"Hello, who are you?", "Who are you? Hello", true}, // one block moved
		{"what is the capital of France", "the capital of France, what is it", true},
		{"how do I sort a list in python", "in python, how do I sort a list", true},
		{"小树像什么？房子像什么？", "房子像什么？小树像什么？", true}, // sentences in another order
		{"微信聊天记录怎么恢复", "怎么恢复微信聊天记录", true},
		{"Is a dog bigger than a cat", "is a DOG bigger than a cat???", true},
		{"one", "two", true}, // nothing shared
	}
	for _, tc := range tests {
		ok, reason := GuardsAllow(g, tc.query, tc.candidate)
		if ok != tc.allow {
			t.Errorf("GuardsAllow(%q, %q) = %v, want %v", tc.query, tc.candidate, ok, tc.allow)
		}
		if !ok && reason != GuardOrder {
			t.Errorf("GuardsAllow(%q, %q) reason = %q, want %q", tc.query, tc.candidate, reason, GuardOrder)
		}
		if back, _ := GuardsAllow(g, tc.candidate, tc.query); back != ok {
			t.Errorf("GuardsAllow not symmetric for %q, %q", tc.query, tc.candidate)
		}
	}
}

func TestGuardEntities(t *testing.T) {
	g := Guards{Entities: true}
	tests := []struct {
		query, candidate string
		allow            bool
	}{
		{"Who is Alice's father?", "Who is Carol's father?", false},
		{"who is alice's father", "Who is Alice's father?", true}, // case: the name is still there
		{"How do I call getUserName in Go?", "How do I call getUserById in Go?", false},
		{"what does os.path.join do", "what does os.path.split do", false},
		{"what does my_func return", "what does my_func return?", true},
		{"open https://example.com/a", "open https://example.com/b", false},
		{"mail bob@example.com", "mail alice@example.com", false},
		{`what does "hello" mean`, `what does "goodbye" mean`, false},
		{`what does "hello" mean`, "what does hello mean", true},
		{"《红楼梦》的作者是谁", "《水浒传》的作者是谁", false},
		{"weather on Monday", "weather on Friday", false},
		{"what's the weather today", "what's the weather tomorrow", false},
		{"今天天气怎么样", "明天天气怎么样", false},
		{"run 10 km", "run 10 miles", false},
		{"run 10 km", "run 10 kilometers", true}, // synonyms
		{"10公里是多少米", "10英里是多少米", false},
		{"3天能到吗", "3周能到吗", false},
		{"Explain TCP handshakes", "explain tcp handshakes", true},
		{"Please, what is the capital of France?", "What is the capital of France?", true},
		{"How do I sort a list?", "how can I sort a list", true},
	}
	for _, tc := range tests {
		ok, reason := GuardsAllow(g, tc.query, tc.candidate)
		if ok != tc.allow {
			t.Errorf("GuardsAllow(%q, %q) = %v, want %v", tc.query, tc.candidate, ok, tc.allow)
		}
		if !ok && reason != GuardEntity {
			t.Errorf("GuardsAllow(%q, %q) reason = %q, want %q", tc.query, tc.candidate, reason, GuardEntity)
		}
		if back, _ := GuardsAllow(g, tc.candidate, tc.query); back != ok {
			t.Errorf("GuardsAllow not symmetric for %q, %q", tc.query, tc.candidate)
		}
	}
}

func FuzzGuardsAllow(f *testing.F) {
	f.Add("Is a dog bigger than a cat?", "Is a cat bigger than a dog?")
	f.Add(`say "hi" to bob@x.io at https://x.io/a_b`, "《书》 10公里 今天 getX()")
	f.Fuzz(func(t *testing.T, q, c string) {
		ok, reason := GuardsAllow(DefaultGuards(), q, c)
		if ok != (reason == "") {
			t.Fatalf("ok %v with reason %q", ok, reason)
		}
		if ok2, _ := GuardsAllow(DefaultGuards(), q, q); !ok2 {
			t.Fatalf("a text does not match itself: %q", q)
		}
	})
}

func TestGuardManyNumbers(t *testing.T) {
	// More numbers than the inline buffer holds.
	a := "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"
	b := "20 19 18 17 16 15 14 13 12 11 10 9 8 7 6 5 4 3 2 1"
	g := Guards{Numbers: true}
	if ok, _ := GuardsAllow(g, a, b); !ok {
		t.Error("same 20 numbers in another order were rejected")
	}
	if ok, _ := GuardsAllow(g, a, b+" 21"); ok {
		t.Error("an extra 21st number was allowed")
	}
}

func TestGuardParseHanNumber(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"十", 10, true}, {"十二", 12, true}, {"二十", 20, true}, {"一百零五", 105, true},
		{"三千零二十", 3020, true}, {"两万", 20000, true}, {"一万零一", 10001, true},
		{"三万亿", 3e12, true}, {"九", 9, true}, {"二零二四", 2024, true},
		{"三四百", 0, false}, {"万万", 0, false},
	}
	for _, tc := range tests {
		got, ok := parseHanNumber(tc.in)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parseHanNumber(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func BenchmarkGuardsAllow(b *testing.B) {
	g := DefaultGuards()
	q := "Why doesn't my Go program print 42 when I run it with 3 goroutines?"
	c := "Why does my Go program not print 42 when it runs with three goroutines?"
	zq, zc := "为什么我的程序运行三个协程时不打印四十二？", "我的程序在运行3个协程的时候为何不输出42"
	b.ReportAllocs()
	for b.Loop() {
		GuardsAllow(g, q, c)
		GuardsAllow(g, zq, zc)
	}
}
