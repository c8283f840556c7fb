package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"frontdoor/adapters"
	"frontdoor/router/reuse"
)

// upstream asks the judge model for the verifier, as a client's request
// goes (reuse.JudgeSender).
var _ reuse.JudgeSender = (*upstream)(nil)

var errNoJudge = errors.New("no node serving the judge model took the call")

// SendJudge sends the judge's request the way forward sends a client's,
// within ctx (the judge's timeout): to the candidates serving the model
// (after waiting for a slot), moving on to another node after a failure up
// to balancer.retries, then to spill-over when
// cache.semantic.verify.spillover allows it (charged a 4-token answer
// against the mirrored quota; counted in no spill-over series). It never
// goes through a tenant's admission or token budget. Only a 200 with a
// chat answer is an answer: anything else fails its attempt.
func (u *upstream) SendJudge(ctx context.Context, model string, body func(served string) []byte) (*adapters.Answer, error) {
	x := &exchange{start: time.Now(), id: "judge-" + newRequestID(), endpoint: adapters.EndpointChat, upCtx: ctx}
	defer x.slot.release()
	served, ok := u.pool.Resolve(model, x.id)
	if !ok {
		return nil, fmt.Errorf("no node serves the judge model %q", model)
	}
	x.model = served
	ur := &adapters.UpstreamRequest{Endpoint: adapters.EndpointChat, Body: body(served), RequestID: x.id, Model: served}
	st := u.waitCandidates(x)
	var ans *adapters.Answer
	st.accept = func(resp *adapters.UpstreamResponse) (err error) {
		ans, err = judgeAnswer(resp)
		return err
	}
	if a, ok := u.tryNodes(x, ur, st); ok {
		a.resp.Close()
		return ans, nil
	}
	if s := u.rt.Load().spill; s != nil && !st.final && u.conf().Cache.Semantic.Verify.Spillover {
		if wait, _ := s.take(len(ur.Body)/4 + 4); wait == 0 {
			resp, err := s.send(x, ur)
			if err != nil {
				return nil, err
			}
			defer resp.Close()
			return judgeAnswer(resp)
		}
	}
	if st.lastErr != nil {
		return nil, st.lastErr
	}
	return nil, errNoJudge
}

// judgeAnswer reads the judge's answer: an error unless a 200 with a chat
// answer.
func judgeAnswer(resp *adapters.UpstreamResponse) (*adapters.Answer, error) {
	if resp.Status != 200 {
		return nil, fmt.Errorf("judge answered HTTP %d", resp.Status)
	}
	a, err := adapters.ParseAnswer(adapters.EndpointChat, resp.Body)
	if err != nil {
		return nil, fmt.Errorf("judge answer: %w", err)
	}
	return a, nil
}
