package router

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// A tool-call stream from a node (gpusim answers tool_choice "required"
// with a call) goes through frontdoor whole: the official SDK assembles
// it; the assembled call is cached when cache.eligibility.cache_tool_calls
// allows, and replayed, streamed and not, as the same call.
func TestToolCallStreamsCachedAndReplayed(t *testing.T) {
	for _, cacheToolCalls := range []bool{true, false} {
		name := "cache_tool_calls"
		if !cacheToolCalls {
			name = "no_cache_tool_calls"
		}
		t.Run(name, func(t *testing.T) {
			gw, s := cacheGateway(t, "memory", func(c *Config) { c.Cache.Eligibility.CacheToolCalls = cacheToolCalls })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
			params := openai.ChatCompletionNewParams{
				Model:    "qwen3-8b",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
				Tools: []openai.ChatCompletionToolUnionParam{
					openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object"}}),
				},
				ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
				MaxTokens:  openai.Int(6),
			}
			stream := func() (openai.ChatCompletionMessageToolCallUnion, string, string) {
				t.Helper()
				var resp *http.Response
				st := client.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&resp))
				acc := openai.ChatCompletionAccumulator{}
				for st.Next() {
					acc.AddChunk(st.Current())
				}
				if err := st.Err(); err != nil {
					t.Fatalf("stream: %v", err)
				}
				if len(acc.Choices) != 1 || len(acc.Choices[0].Message.ToolCalls) != 1 {
					t.Fatalf("assembled %+v", acc.ChatCompletion)
				}
				return acc.Choices[0].Message.ToolCalls[0], acc.Choices[0].FinishReason, resp.Header.Get("X-Cache")
			}
			first, finish, xc := stream()
			if xc != "miss" || !strings.HasPrefix(first.ID, "call_") || first.Function.Name != "get_weather" || !strings.HasPrefix(first.Function.Arguments, `{"text":"`) || finish != "tool_calls" {
				t.Fatalf("first: X-Cache %q, call %+v, finish %q", xc, first, finish)
			}
			received := s.Stats().Received
			if !cacheToolCalls {
				if _, _, xc := stream(); xc != "miss" || s.Stats().Received != received+1 {
					t.Fatalf("cache_tool_calls false: X-Cache %q, node calls %d -> %d", xc, received, s.Stats().Received)
				}
				return
			}
			var xcs []string
			for range 50 { // the write-back is asynchronous
				var again openai.ChatCompletionMessageToolCallUnion
				again, finish, xc = stream()
				xcs = append(xcs, xc)
				if xc == "hit-exact" {
					if again.Function.Name != first.Function.Name || again.Function.Arguments != first.Function.Arguments || finish != "tool_calls" {
						t.Fatalf("replayed %+v (finish %q), want %+v", again, finish, first)
					}
					break
				}
			}
			if xc != "hit-exact" {
				t.Fatalf("never replayed: %v", xcs)
			}
			// The stream's call answers a non-streaming request too.
			var resp *http.Response
			cc, err := client.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			if xc := resp.Header.Get("X-Cache"); xc != "hit-exact" || len(cc.Choices) != 1 || len(cc.Choices[0].Message.ToolCalls) != 1 ||
				cc.Choices[0].Message.ToolCalls[0].Function.Arguments != first.Function.Arguments || cc.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("non-streaming: X-Cache %q, %+v", xc, cc.Choices)
			}
		})
	}
}
