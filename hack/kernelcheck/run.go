package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mhistack/mhistack/hack/internal/initramfs"
	qh "github.com/mhistack/mhistack/hack/internal/qemuharness"
)

// job is one guest run to do: a kernel, a profile, from PBL or not.
type job struct {
	k     kernelDir
	p     string
	pbl   bool
	quirk *quirkRun // a quirk run (quirks.go), nil for the checks
	lock  *lockRun  // a lock run (locks.go), nil for the checks
}

// run checks the prerequisites, runs every job (c.jobs at once) and
// prints the results; an error means a check failed or a prerequisite is
// missing (qh.PrereqError).
func run(ctx context.Context, c config) error {
	start := time.Now()
	if c.qemu == "" || c.mhictl == "" || len(c.kernels) == 0 {
		return qh.PrereqError{Msg: "need -qemu, -mhictl and at least one -kernel LABEL=DIR (hack/kernel-crosscheck.sh passes them)"}
	}
	if err := initramfs.CheckStatic(c.busybox); err != nil {
		return qh.PrereqError{Msg: err.Error()}
	}
	work, cleanup, err := qh.Prepare("kernel-crosscheck", c.keep, c.profiles, c.pbl, true)
	if err != nil {
		return err
	}
	keptFailed := false
	defer func() {
		if !keptFailed {
			cleanup()
		}
	}()
	c.work = work

	jobs, err := planJobs(c)
	if err != nil {
		return err
	}
	results, errs := runJobs(ctx, c, jobs)
	for _, err := range errs {
		if qh.IsPrereq(err) {
			return err
		}
	}
	failed := printResults(jobs, results, errs)
	fmt.Printf("kernel-crosscheck: %d runs in %v\n", len(jobs), time.Since(start).Round(time.Second))
	if failed > 0 && !c.keep {
		keptFailed = keepFailedLogs(work, results)
	}
	if failed > 0 {
		return fmt.Errorf("%d checks failed", failed)
	}
	return nil
}

// planJobs lists the runs: every kernel with every profile (for "all",
// the profiles the kernel drives), then with every PBL profile.
func planJobs(c config) ([]job, error) {
	var jobs []job
	for _, k := range c.kernels {
		profiles := c.profiles
		if len(profiles) == 1 && profiles[0] == "all" {
			var err error
			if profiles, err = kernelProfiles(k); err != nil {
				return nil, err
			}
		}
		for _, p := range profiles {
			jobs = append(jobs, job{k: k, p: p})
		}
		for _, p := range c.pbl {
			jobs = append(jobs, job{k: k, p: p, pbl: true})
		}
	}
	// The quirk runs: one kernel each (docs/KERNEL-CROSSCHECK.md §8).
	qs, err := quirkRunsFor(c.quirks)
	if err != nil {
		return nil, err
	}
	for i := range qs {
		q := &qs[i]
		jobs = append(jobs, job{k: q.pickKernel(c.kernels), p: q.profile, pbl: q.pbl, quirk: q})
	}
	// The lock runs: the first kernel given.
	ls, err := lockRunsFor(c.locks)
	if err != nil {
		return nil, err
	}
	for i := range ls {
		jobs = append(jobs, job{k: c.kernels[0], p: ls[i].profile, lock: &ls[i]})
	}
	return jobs, nil
}

// runJobs runs the jobs, c.jobs at a time, and returns each one's result
// or error, in the jobs' order.
func runJobs(ctx context.Context, c config, jobs []job) ([]*result, []error) {
	results := make([]*result, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, max(c.jobs, 1))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			results[i], errs[i] = runOne(ctx, c, j)
		}()
	}
	wg.Wait()
	return results, errs
}

// printResults prints every run's verdicts and timings and returns the
// number of failed checks (a run that could not finish counts as one).
func printResults(jobs []job, results []*result, errs []error) int {
	fmt.Printf("\nkernel-crosscheck: results\n")
	failed := 0
	for i, r := range results {
		if errs[i] != nil {
			fmt.Printf("FAIL  %s/%s  run: %v\n", jobs[i].k.label, jobs[i].p, errs[i])
			failed++
			continue
		}
		rep := r.report()
		rep.Print(os.Stdout)
		failed += r.failed()
		fmt.Printf("      %s  boot to /init %v, run %v\n", r.scope(), r.boot.Round(100*time.Millisecond), r.wall.Round(100*time.Millisecond))
		if rep.Failed() > 0 {
			printFailureLogs(r)
		}
	}
	return failed
}

// keepFailedLogs keeps the logs of the failed runs when the work directory
// would be removed (no -keep): the passing runs' directories and every
// initramfs go, the failed runs' serial, modem and kernel logs stay. It
// reports whether anything was kept.
func keepFailedLogs(work string, results []*result) bool {
	failedDirs := map[string]bool{}
	for _, r := range results {
		if r != nil && r.report().Failed() > 0 {
			failedDirs[filepath.Base(r.logDir)] = true
		}
	}
	if len(failedDirs) == 0 {
		return false
	}
	entries, _ := os.ReadDir(work)
	for _, e := range entries {
		p := filepath.Join(work, e.Name())
		if !failedDirs[e.Name()] {
			os.RemoveAll(p)
			continue
		}
		os.Remove(filepath.Join(p, "initramfs.cpio.gz"))
		os.Remove(filepath.Join(p, "modem.sock"))
	}
	fmt.Printf("kernel-crosscheck: the failed runs' logs are kept in %s\n", work)
	return true
}
