package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/decode"
	"github.com/manifoldlb/manifold/internal/store"
)

const (
	publishEvery = time.Second
	// recordRefresh is how often a node writes its record again while it does not
	// change (the same bytes, which the steering controller does not decode again):
	// a record deleted behind the node's back comes back.
	recordRefresh = time.Minute
	// leaseTTL is how long a node stays alive in the fleet's eyes after its last
	// keep-alive, in seconds: a few missed publications, not one.
	leaseTTL = 5
)

// Publish keeps the node's alive key under a lease, every second until ctx ends, and
// writes its record when it changed (at most every second; the same again every
// recordRefresh; rates and RTTs that moved within their deadbands, HoldSteady, do not
// change it): at 1 000 sites the records are what the steering controller reads, and
// an unchanged one costs it nothing. Then it revokes the lease, so the node shows
// gone at once.
// record gives what the node knows (name, site, addresses, BGP, load); the source
// fills in what it knows (applied revision, apply error, stale since). Runs on a
// goroutine of the caller's, which owns it.
func (s *Source) Publish(ctx context.Context, record func() wire.NodeRecord) {
	var lease clientv3.LeaseID
	tick := s.clock.NewTicker(publishEvery)
	defer tick.Stop()
	var failing error
	var truncated *wire.RecordTruncation // the last record's cut; nil: it fit whole
	var last lastRecord
	for {
		cut, err := s.publish(ctx, &lease, &last, record())
		switch {
		case err != nil && failing == nil && ctx.Err() == nil:
			s.log.Warn("cannot publish the node's record in the fleet store", "err", err)
		case err == nil && failing != nil:
			s.log.Info("publishing the node's record in the fleet store again")
		}
		switch {
		case cut != nil && truncated == nil:
			s.log.Warn("the node's record is cut to fit its bound: the fleet sees part of its lists (its truncated field says what was left out)",
				"bound", wire.MaxRecordBytes, "services_left_out", cut.Services, "refused_left_out", cut.Refused, "tunnel_services_left_out", cut.TunnelServices)
		case cut == nil && truncated != nil && err == nil:
			s.log.Info("the node's record fits its bound again")
		}
		failing, truncated = err, cut
		select {
		case <-ctx.Done():
			s.withdraw(ctx, lease)
			return
		case <-tick.C():
		}
	}
}

// lastRecord is the record a node last wrote, when, and the lease of its alive key.
type lastRecord struct {
	data      []byte
	services  []wire.ServiceLoad // its services, with the rates and RTTs it published (HoldSteady)
	updatedAt string             // its UpdatedAt
	written   time.Time
	lease     clientv3.LeaseID
}

// publish keeps the lease (granting a new one when it expired while etcd was away)
// and writes the alive key under a new lease, and the record, cut to its bound
// (encodeRecord), when it is not the last one written (its time aside), with a new
// lease, or recordRefresh after the last write: cut says what it left out, nil when
// the record fit whole.
func (s *Source) publish(ctx context.Context, lease *clientv3.LeaseID, last *lastRecord, rec wire.NodeRecord) (cut *wire.RecordTruncation, err error) {
	rec = s.fill(rec)
	HoldSteady(last.services, rec.Services) // a steady state keeps the record's bytes
	now := rec.UpdatedAt
	rec.UpdatedAt = last.updatedAt // unchanged, it is the same bytes as the last write
	data, cut, err := encodeRecord(rec)
	if err != nil {
		return nil, err
	}
	changed := !bytes.Equal(data, last.data)
	if changed {
		rec.UpdatedAt = now
		if data, cut, err = encodeRecord(rec); err != nil {
			return nil, err
		}
	}
	if cut != nil {
		s.recordsTruncated.Add(1)
	}
	s.recordBytes.Store(int64(len(data)))
	ctx, cancel := context.WithTimeout(ctx, publishEvery)
	defer cancel()
	if *lease != 0 {
		if _, err := s.cli.KeepAliveOnce(ctx, *lease); errors.Is(err, rpctypes.ErrLeaseNotFound) {
			*lease = 0
		} else if err != nil {
			return nil, fmt.Errorf("keep the lease: %w", err)
		}
	}
	var ops []clientv3.Op
	if *lease == 0 {
		g, err := s.cli.Grant(ctx, leaseTTL)
		if err != nil {
			return nil, fmt.Errorf("grant a lease: %w", err)
		}
		*lease = g.ID
	}
	if last.lease != *lease {
		ops = append(ops, clientv3.OpPut(s.keys.alive(s.name), "", clientv3.WithLease(*lease)))
	}
	if changed || len(ops) > 0 || s.clock.Now().Sub(last.written) >= recordRefresh {
		ops = append(ops, clientv3.OpPut(s.keys.node(s.name), string(data)))
	}
	if len(ops) == 0 {
		return cut, nil
	}
	if _, err = s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return cut, err
	}
	*last = lastRecord{data: data, services: rec.Services, updatedAt: rec.UpdatedAt, written: s.clock.Now(), lease: *lease}
	return cut, nil
}

// fill completes the node's record with the source's state.
func (s *Source) fill(rec wire.NodeRecord) wire.NodeRecord {
	st := s.State()
	rec.Name = s.name
	rec.V = wire.RecordVersion
	rec.AppliedRevision, rec.AppliedAt, rec.ApplyError = st.AppliedRevision, rfc3339(st.AppliedAt), st.ApplyError
	if len(st.Refused) > 0 {
		rec.Refused = WireRefused(st.Refused)
	}
	rec.StaleSince = rfc3339(st.StaleSince)
	rec.UpdatedAt = rfc3339(s.clock.Now())
	return rec
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// withdraw revokes the lease: the alive key goes with it; the record stays.
func (s *Source) withdraw(ctx context.Context, lease clientv3.LeaseID) {
	if lease == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishEvery)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, lease); err != nil {
		s.log.Warn("cannot withdraw the node from the fleet: it shows alive until its lease expires", "ttl_seconds", leaseTTL, "err", err)
	}
}

// Fleet lists every node that published a record, alive or gone, and how far each is
// from the store's services.
func (s *Source) Fleet(ctx context.Context) (wire.FleetStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	st := s.State()
	out := wire.FleetStatus{
		Prefix: s.keys.prefix, Endpoints: s.cli.Endpoints(),
		Reachable: st.Reachable, StaleSince: rfc3339(st.StaleSince), Nodes: []wire.FleetNode{},
	}
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.keys.nodes(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.alives(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.services(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.generation()),
	).Commit()
	if err != nil {
		return out, store.Unavailable("cannot read the fleet store (etcd): %v", err)
	}
	alive := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		alive[string(kv.Key)] = true
	}
	var guardVersion int64
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		out.Revision = max(out.Revision, kv.ModRevision)
	}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		out.Revision = max(out.Revision, kv.ModRevision)
		guardVersion = kv.Version
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var n wire.FleetNode
		if err := decode.JSONInto(kv.Value, decode.MaxFileSize, &n.NodeRecord); err != nil {
			s.log.Warn("unreadable node record in the fleet store", "key", string(kv.Key), "err", err)
			continue
		}
		// the key names the node: a record cannot speak for another
		n.Name = strings.TrimPrefix(string(kv.Key), s.keys.nodes())
		n.Alive = alive[s.keys.alive(n.Name)]
		n.Agrees = n.AppliedRevision == out.Revision
		if !n.Agrees {
			n.Lag = max(1, guardVersion-s.guardVersionAt(ctx, n.AppliedRevision))
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out, nil
}

// guardVersionAt is the number of changes made to the services up to revision rev
// (the guard's version then): the difference to the current one is a node's lag in
// changes. 0 when that revision is compacted away.
func (s *Source) guardVersionAt(ctx context.Context, rev int64) int64 {
	if rev == 0 {
		return 0
	}
	resp, err := s.cli.Get(ctx, s.keys.generation(), clientv3.WithRev(rev))
	if err != nil || len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].Version
}
