package main

// The kernel's own verdict: its complaints about the MHI stack in dmesg,
// apart from the known messages of the reference kernels
// (docs/KERNEL-CROSSCHECK.md §4).

import (
	"regexp"
	"strings"
)

var dmesgErrRE = regexp.MustCompile(`(?i)fail|timeout|timed out|unable|could not|error|warn|BUG|call trace|oops|underflow`)
var dmesgOK = regexp.MustCompile(`SYS ERROR|SYS_ERROR|System error detected|Triggering SYS_ERR|error_detected|Transitioning from PM state`)
var dmesgMHI = regexp.MustCompile(`(?i)mhi|wwan|0000:00:0`)

// knownKernelMessages are complaints of the reference kernels that no
// device behaviour avoids; they are reported, not failed.
var knownKernelMessages = []struct {
	re  *regexp.Regexp
	why string
}{
	// One shared MSI runs both the INTVEC handler (MHISTATUS says
	// SYS_ERR) and the control event ring's (STATE_CHANGE(SYS_ERR)), so
	// both kernels queue two SYS_ERR transitions: two MHI resets, two
	// READY transitions. On 6.1 the second READY transition may find the
	// first already in M0 and log this; recovery completes regardless.
	{regexp.MustCompile(`Error moving to state POWER ON RESET from M0`), "second READY transition of a doubly detected SYS_ERR"},
	// mhi_queue publishes a TRE before taking its runtime PM reference;
	// when another CPU rings the channel doorbell in between (DB_MODE
	// handling), the completion's put comes first. Seen under the
	// four-stream ping burst; the runtime-pm check runs before it.
	{regexp.MustCompile(`Runtime PM usage count underflow`), "mhi_queue takes its runtime PM reference after the TRE is visible"},
}

// afterDoubleSysErr are complaints that follow from the 6.1 race above:
// its failed second READY transition leaves the kernel's idea of the
// device state at READY while the modem is in M0, so every later runtime
// suspend waits for M0/M1 until the controller timeout and fails (-EIO),
// and rmmod waits for it. Tolerated only after that message.
var afterDoubleSysErr = regexp.MustCompile(`Could not enter M0/M1 state|failed to suspend device: -5`)

// resumeFailure is how the kernel reports a modem that crashed while
// suspended, and what mhi_net says of the packet that woke it (the
// check's ping, queued while the kernel powers the crashed modem down:
// "Failed to queue TX buf (-5)"; seen on 6.1 with sierra-em919x):
// suspended (the syserr-in-m3 check does it on purpose): mhi_pm_resume
// finds SYS_ERR, mhi_pci_generic starts its recovery work.
var resumeFailure = regexp.MustCompile(`Resuming from non M3 state|failed to resume device|Linkdown or Error Fatal|Failed to queue TX buf \(-5\)`)

// suspendBusy is mhi_pci_generic's runtime suspend refused with -EBUSY:
// mhi_pm_suspend says "not now" while the MHI state machine is in a
// transition, and runtime PM tries again later. Seen at the Mission Mode
// transition of a SYS_ERR recovery (6.1 and 6.12, PBL runs and
// qcom-sdx55m, load ~20), when the autosuspend timer fired during it.
// Tolerated only within transitionWindow lines of a transition line.
var (
	suspendBusy      = regexp.MustCompile(`failed to suspend device: -16`)
	stateTransition  = regexp.MustCompile(`Handling state transition|Processing Mission Mode transition|Received EE event`)
	transitionWindow = 4
)

// dmesgErrors returns the kernel's complaints about the MHI stack, and
// the known ones separately.
func dmesgErrors(lines []string) (complaints, tolerated []string) {
	doubled, inM3Crash := false, false
	sinceTransition := transitionWindow + 1
next:
	for _, l := range lines {
		sinceTransition++
		if stateTransition.MatchString(l) {
			sinceTransition = 0
		}
		switch {
		case strings.Contains(l, "mhistack: syserr-in-m3 begin"):
			inM3Crash = true
		case strings.Contains(l, "mhistack: syserr-in-m3 end"):
			inM3Crash = false
		}
		if !dmesgMHI.MatchString(l) || !dmesgErrRE.MatchString(l) || dmesgOK.MatchString(l) {
			continue
		}
		l = strings.TrimSpace(l)
		if inM3Crash && resumeFailure.MatchString(l) {
			tolerated = append(tolerated, l+" (the syserr-in-m3 check crashed the suspended modem)")
			continue
		}
		for i, k := range knownKernelMessages {
			if k.re.MatchString(l) {
				tolerated = append(tolerated, l+" ("+k.why+")")
				doubled = doubled || i == 0
				continue next
			}
		}
		if sinceTransition <= transitionWindow && suspendBusy.MatchString(l) {
			tolerated = append(tolerated, l+" (runtime suspend refused during a state transition; runtime PM retries)")
			continue
		}
		if doubled && afterDoubleSysErr.MatchString(l) {
			tolerated = append(tolerated, l+" (kernel left in READY by the doubly detected SYS_ERR)")
			continue
		}
		complaints = append(complaints, l)
	}
	return complaints, tolerated
}
