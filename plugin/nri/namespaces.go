package nri

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// DefaultNamespaceLabel selects the namespaces whose pods are injected.
const DefaultNamespaceLabel = inject.InjectLabel + "=" + inject.InjectEnabled

// A label key's name or a label value (63 characters at most), and a key's
// DNS subdomain prefix (253). The lengths are checked apart: as counted
// repetitions the expressions compiled into large programs at every
// nvmock command's start.
var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

func isLabelName(s string) bool   { return len(s) <= 63 && labelName.MatchString(s) }
func isLabelPrefix(s string) bool { return len(s) <= 253 && labelPrefix.MatchString(s) }

// ValidateNamespaceLabel checks a KEY=VALUE namespace label.
func ValidateNamespaceLabel(s string) error {
	key, value, ok := strings.Cut(s, "=")
	name := key
	if prefix, n, slash := strings.Cut(key, "/"); slash {
		if !isLabelPrefix(prefix) {
			return fmt.Errorf("namespace label %q: key prefix %q is not a DNS subdomain", s, prefix)
		}
		name = n
	}
	switch {
	case !ok:
		return fmt.Errorf("namespace label %q: want KEY=VALUE, e.g. %s", s, DefaultNamespaceLabel)
	case !isLabelName(name):
		return fmt.Errorf("namespace label %q: key %q is not a label name (letters, digits, -_. inside, 63 at most)", s, key)
	case value != "" && !isLabelName(value):
		return fmt.Errorf("namespace label %q: value %q is not a label value (letters, digits, -_. inside, 63 at most)", s, value)
	}
	return nil
}

// errWatchExpired: the API server no longer holds the history a watch asked
// for (410 Gone: etcd compacted it, or a restarted API server's cache starts
// later). Only a new list can catch up.
var errWatchExpired = errors.New("the namespace watch expired (410 Gone)")

// listOptedIn lists the namespaces with the label selector sel (KEY=VALUE),
// filtered by the API server, and returns the list's resourceVersion, where
// a watch starts.
func listOptedIn(ctx context.Context, ns hostprep.NamespaceAPI, sel string) (map[string]bool, string, error) {
	list, err := ns.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, "", fmt.Errorf("list namespaces: %w", err)
	}
	out := make(map[string]bool, len(list.Items))
	for _, n := range list.Items {
		out[n.Name] = true
	}
	return out, list.ResourceVersion, nil
}

// watchOptedIn follows the namespaces matching sel from resourceVersion rv,
// calling update with each namespace that starts (true) or stops (false)
// matching: a label-selected watch reports a namespace that loses the label
// as DELETED. client-go's RetryWatcher carries the watch over its ends (the
// API server closes a watch after 30 to 60 minutes; connections drop): it
// watches again from the last resourceVersion it saw, bookmarks included,
// so nothing is missed and nothing is listed again. Each watch request's
// outcome goes to watched (nil: it started); one that fails is retried
// after a back-off that doubles from a second to maxBackoff (the
// RetryWatcher alone would ask every second, and a recovering API server
// hears from every node).
//
// It returns nil when ctx ends, errWatchExpired (wrapped) when the API
// server answers 410 Gone, or an error when the watch cannot go on.
func watchOptedIn(ctx context.Context, ns hostprep.NamespaceAPI, sel, rv string, maxBackoff time.Duration,
	update func(name string, in bool), watched func(error)) error {
	backoff := time.Duration(0)
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = sel
		w, err := ns.Watch(ctx, o)
		switch {
		case err == nil:
			backoff = 0
			watched(nil)
			return w, nil
		case ctx.Err() != nil:
			return nil, err
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			// Why an event: the RetryWatcher ends on a 410 event, but a 410
			// answering the request itself it retries forever, from the same
			// expired version, and the list would never be redone.
			return expiredWatch(err), nil
		}
		watched(err)
		backoff = min(max(2*backoff, time.Second), maxBackoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			// Why retried: the RetryWatcher would end the watch on a 401 or
			// 403, but an API server that is starting refuses for a moment
			// (before its RBAC cache fills), and a rotated token takes up to
			// a minute to be read. Without its type, the error is retried.
			return nil, errors.New(err.Error())
		}
		return nil, err
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	defer func() {
		rw.Stop()
		<-rw.Done()
	}()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-rw.ResultChan():
		}
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return errors.New("watch namespaces: the watch stopped")
		}
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				return fmt.Errorf("watch namespaces: %s event: %w", ev.Type, err)
			}
			update(m.GetName(), ev.Type != watch.Deleted)
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return fmt.Errorf("%w: %v", errWatchExpired, err)
			}
			return fmt.Errorf("watch namespaces: %w", err)
		}
	}
}

// expiredWatch is a watch whose one event is err's status.
func expiredWatch(err error) watch.Interface {
	ch := make(chan watch.Event, 1)
	status := apierrors.NewResourceExpired(err.Error()).ErrStatus
	if s := apierrors.APIStatus(nil); errors.As(err, &s) {
		status = s.Status()
	}
	ch <- watch.Event{Type: watch.Error, Object: &status}
	close(ch)
	return watch.NewProxyWatcher(ch)
}
