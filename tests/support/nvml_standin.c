/*
 * A stand-in libnvidia-ml.so.1 for the tests: the NVML entry points guardian's reader
 * (src/guardian/hostio/nvml.py) reaches through NVIDIA's own binding (nvidia-ml-py's
 * pynvml, its ctypes structures and its error classes), with the signatures and struct
 * layouts NVIDIA's nvml.h gives them, answering from a recording. No GPU and no driver:
 * it is built at test time (tests/support/nvml_standin.py) and found through
 * LD_LIBRARY_PATH, so pynvml's real loading, calls, structures and error mapping run.
 *
 * The recording is a line file named by $GUARDIAN_NVML_STANDIN, written from a
 * recording of tests/fixtures/nvml (JSON) by nvml_standin.py; each line is
 *     PHASE GPU KEY = INT...   (numbers; a list may be empty)
 *     PHASE GPU KEY s TEXT     (a string without spaces)
 *     PHASE GPU KEY ! CODE     (the call returns that nvmlReturn_t)
 * PHASE 0 answers from the first read, 1 from the second read on (nvmlDeviceGetCount_v2
 * counts the reads); GPU -1 is the system. A key absent answers NVML_ERROR_NOT_SUPPORTED,
 * as NVML does for what a GPU does not have.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nvml.h's types, as laid out there */
typedef int nvmlReturn_t;
typedef struct standin_device *nvmlDevice_t;
typedef struct standin_set *nvmlEventSet_t;

typedef struct {
    char busIdLegacy[16];         /* NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];               /* NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE */
} nvmlPciInfo_t;

typedef struct {                  /* nvmlProcessInfo_v2_t, alias nvmlProcessInfo_t */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

enum {
    SUCCESS = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6,
    INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, TIMEOUT = 10, UNKNOWN = 999,
};
#define XID_CRITICAL_ERROR 0x8ULL        /* nvmlEventTypeXidCriticalError */
#define VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL  /* NVML_VALUE_NOT_AVAILABLE */
#define NO_INSTANCE 0xFFFFFFFFU          /* gpuInstanceId outside MIG */

/* -- the recording ------------------------------------------------------------------ */
typedef struct {
    int phase, gpu, error;        /* error: an nvmlReturn_t, 0 for an answer */
    char key[64];
    char text[128];
    unsigned long long *ints;
    unsigned int n;
} entry_t;

static entry_t *entries;
static unsigned int count_entries;
static int loaded, reads;
static unsigned int events_taken;
static unsigned char registered[256];
struct standin_set { int unused; };
struct standin_device { char unused; };
static struct standin_set the_set;
static struct standin_device devices_storage[1];  /* a handle: its address + index + 1 */

static int load(void) {
    const char *path = getenv("GUARDIAN_NVML_STANDIN");
    FILE *f;
    char line[65536];
    if (loaded)
        return 0;
    if (!path || !(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof line, f)) {
        entry_t e;
        char kind[4];
        int used = 0;
        memset(&e, 0, sizeof e);
        if (sscanf(line, "%d %d %63s %3s %n", &e.phase, &e.gpu, e.key, kind, &used) < 4)
            continue;
        char *rest = line + used;
        if (kind[0] == '!') {
            e.error = atoi(rest);
        } else if (kind[0] == 's') {
            sscanf(rest, "%127s", e.text);
        } else {
            unsigned int cap = 8;
            char *end;
            e.ints = malloc(cap * sizeof *e.ints);
            for (;;) {
                unsigned long long v = strtoull(rest, &end, 10);
                if (end == rest)
                    break;
                if (e.n == cap)
                    e.ints = realloc(e.ints, (cap *= 2) * sizeof *e.ints);
                e.ints[e.n++] = v;
                rest = end;
            }
        }
        entries = realloc(entries, (count_entries + 1) * sizeof *entries);
        entries[count_entries++] = e;
    }
    fclose(f);
    loaded = 1;
    return 0;
}

/* the answer for (gpu, key): the later phase's once the second read began */
static const entry_t *find(int gpu, const char *key) {
    const entry_t *found = NULL;
    for (unsigned int i = 0; i < count_entries; i++) {
        const entry_t *e = &entries[i];
        if (e->gpu != gpu || strcmp(e->key, key) != 0 || (e->phase == 1 && reads < 2))
            continue;
        if (!found || e->phase >= found->phase)
            found = e;
    }
    return found;
}

static int index_of(nvmlDevice_t device) {
    return (int)((uintptr_t)device - (uintptr_t)devices_storage) - 1;
}

/* one number of a GPU's answer: NOT_SUPPORTED when absent, its error when one */
static nvmlReturn_t number(nvmlDevice_t device, const char *key, unsigned int at,
                           unsigned long long *out) {
    const entry_t *e = find(index_of(device), key);
    if (!out)
        return INVALID_ARGUMENT;
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    if (at >= e->n)
        return UNKNOWN;
    *out = e->ints[at];
    return SUCCESS;
}

static nvmlReturn_t uint_of(nvmlDevice_t device, const char *key, unsigned int *out) {
    unsigned long long v = 0;
    nvmlReturn_t r = number(device, key, 0, out ? &v : NULL);
    if (r == SUCCESS)
        *out = (unsigned int)v;
    return r;
}

/* -- the library ---------------------------------------------------------------------- */
/* nvml.h, nvmlShutdown: "once for each call to nvmlInit() A reference count of the
 * number of initializations is maintained. Shutdown only occurs when the reference count
 * reaches zero. For backwards compatibility, no error is reported if nvmlShutdown() is
 * called more times than nvmlInit()". The count is written, at each change, to the file
 * $GUARDIAN_NVML_STANDIN_SESSIONS names (when set), for a stand-in nvidia-smi to read. */
static int sessions;

static void tell_sessions(void) {
    const char *path = getenv("GUARDIAN_NVML_STANDIN_SESSIONS");
    FILE *f;
    if (!path || !(f = fopen(path, "w")))
        return;
    fprintf(f, "%d\n", sessions);
    fclose(f);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    const entry_t *e;
    (void)flags;
    if (load() != 0)
        return DRIVER_NOT_LOADED;
    e = find(-1, "init");
    if (e && e->error)
        return e->error;
    sessions++;
    tell_sessions();
    return SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    if (sessions > 0)
        sessions--;
    tell_sessions();
    return SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case SUCCESS: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case TIMEOUT: return "Timeout";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    const entry_t *e = find(-1, "driver_version");
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    if (strlen(e->text) + 1 > length)
        return INSUFFICIENT_SIZE;
    strcpy(version, e->text);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    const entry_t *e;
    reads++;
    e = find(-1, "count");
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    *deviceCount = e->n ? (unsigned int)e->ints[0] : 0;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    const entry_t *count = find(-1, "count");
    const entry_t *e = find((int)index, "handle");
    if (!count || !count->n || index >= count->ints[0] || index >= 255)
        return INVALID_ARGUMENT;
    if (e && e->error)
        return e->error;
    *device = (nvmlDevice_t)((uintptr_t)devices_storage + index + 1);
    return SUCCESS;
}

/* -- identity ------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    const entry_t *e = find(index_of(device), "uuid");
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    if (strlen(e->text) + 1 > length)
        return INSUFFICIENT_SIZE;
    strcpy(uuid, e->text);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    const entry_t *e = find(index_of(device), "pci_bus_id");
    unsigned int domain = 0, bus = 0, dev = 0;
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    memset(pci, 0, sizeof *pci);
    sscanf(e->text, "%x:%x:%x", &domain, &bus, &dev);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = 0x233010deU;  /* device 0x2330 (H100 SXM5), vendor NVIDIA */
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain, bus,
             dev);
    strncpy(pci->busId, e->text, sizeof pci->busId - 1);
    return SUCCESS;
}

/* -- health --------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType,
                                         int counterType, unsigned long long *eccCounts) {
    char key[64];
    snprintf(key, sizeof key, "ecc.%s.%s", errorType == 1 ? "uncorrected" : "corrected",
             counterType == 1 ? "aggregate" : "volatile");
    return number(device, key, 0, eccCounts);
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause,
                                       unsigned int *pageCount,
                                       unsigned long long *addresses) {
    const entry_t *e = find(index_of(device), cause == 1 ? "retired_pages.double_bit"
                                                         : "retired_pages.single_bit");
    if (!pageCount)
        return INVALID_ARGUMENT;
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    if (*pageCount < e->n) {
        *pageCount = e->n;
        return INSUFFICIENT_SIZE;
    }
    if (e->n && !addresses)
        return INVALID_ARGUMENT;
    memcpy(addresses, e->ints, e->n * sizeof *addresses);
    *pageCount = e->n;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
    return uint_of(device, "retired_pages_pending", (unsigned int *)isPending);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    unsigned int *out[4] = {corrRows, uncRows, isPending, failureOccurred};
    for (unsigned int i = 0; i < 4; i++) {
        unsigned long long v;
        nvmlReturn_t r = number(device, "remapped_rows", i, &v);
        if (r != SUCCESS)
            return r;
        *out[i] = (unsigned int)v;
    }
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *reasons) {
    return number(device, "clocks_event_reasons", 0, reasons);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    return uint_of(device, "pcie_replays", value);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType,
                                      unsigned int *temp) {
    if (sensorType != 0)  /* NVML_TEMPERATURE_GPU */
        return INVALID_ARGUMENT;
    return uint_of(device, "temperature", temp);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    return uint_of(device, "power_mw", power);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode) {
    return uint_of(device, "persistence_mode", (unsigned int *)mode);
}

/* a link's answer: INVALID_ARGUMENT past the GPU's last link, as NVML says of a link
   that is invalid; the link's own error when the whole link is one */
static nvmlReturn_t link_field(nvmlDevice_t device, unsigned int link, const char *name,
                               unsigned long long *out) {
    char key[64];
    const entry_t *links = find(index_of(device), "nvlinks");
    const entry_t *whole;
    if (!links)
        return NOT_SUPPORTED;
    if (links->error)
        return links->error;
    if (!links->n || link >= links->ints[0])
        return INVALID_ARGUMENT;
    snprintf(key, sizeof key, "nvlink.%u", link);
    whole = find(index_of(device), key);
    if (whole && whole->error)
        return whole->error;
    snprintf(key, sizeof key, "nvlink.%u.%s", link, name);
    return number(device, key, 0, out);
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      int *isActive) {
    unsigned long long v;
    nvmlReturn_t r = link_field(device, link, "state", &v);
    if (r == SUCCESS)
        *isActive = (int)v;
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                             int counter, unsigned long long *counterValue) {
    static const char *const names[] = {"replay", "recovery", "crc_flit", "crc_data"};
    if (counter < 0 || counter > 3)
        return INVALID_ARGUMENT;
    return link_field(device, link, names[counter], counterValue);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 int *type) {
    unsigned long long v;
    nvmlReturn_t r = link_field(device, link, "remote", &v);
    if (r == SUCCESS)
        *type = (int)v;
    return r;
}

/* -- gpu.reset's questions -------------------------------------------------------------- */
static nvmlReturn_t processes(nvmlDevice_t device, const char *key, unsigned int *infoCount,
                              nvmlProcessInfo_t *infos) {
    const entry_t *e = find(index_of(device), key);
    if (!infoCount)
        return INVALID_ARGUMENT;
    if (!e)
        return NOT_SUPPORTED;
    if (e->error)
        return e->error;
    if (*infoCount < e->n) {
        *infoCount = e->n;
        return INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < e->n; i++) {
        infos[i].pid = (unsigned int)e->ints[i];
        infos[i].usedGpuMemory = VALUE_NOT_AVAILABLE;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = NO_INSTANCE;
    }
    *infoCount = e->n;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    return processes(device, "processes.compute", infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos) {
    return processes(device, "processes.graphics", infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, int *isActive) {
    return uint_of(device, "display_active", (unsigned int *)isActive);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, int *display) {
    return uint_of(device, "display_mode", (unsigned int *)display);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    unsigned long long current, pending;
    nvmlReturn_t r = number(device, "mig_mode", 0, &current);
    if (r == SUCCESS)
        r = number(device, "mig_mode", 1, &pending);
    if (r == SUCCESS) {
        *currentMode = (unsigned int)current;
        *pendingMode = (unsigned int)pending;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    return uint_of(device, "architecture", arch);
}

/* -- events --------------------------------------------------------------------------- */
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    *set = &the_set;
    return SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    (void)set;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                              unsigned long long *eventTypes) {
    return number(device, "supported_events", 0, eventTypes);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    int index = index_of(device);
    (void)eventTypes;
    if (set != &the_set || index < 0 || index >= 255)
        return INVALID_ARGUMENT;
    registered[index] = 1;
    return SUCCESS;
}

/* the recording's events (GPU, Xid pairs) in order, each once, those of a GPU
   registered; then TIMEOUT: none waits (guardian asks with a 0 ms timeout) */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms) {
    const entry_t *e = find(-1, "events");
    (void)timeoutms;
    if (set != &the_set || !data)
        return INVALID_ARGUMENT;
    while (e && !e->error && 2 * events_taken + 1 < e->n) {
        unsigned long long gpu = e->ints[2 * events_taken];
        unsigned long long xid = e->ints[2 * events_taken + 1];
        events_taken++;
        if (gpu < 255 && registered[gpu]) {
            data->device = (nvmlDevice_t)((uintptr_t)devices_storage + gpu + 1);
            data->eventType = XID_CRITICAL_ERROR;
            data->eventData = xid;
            data->gpuInstanceId = data->computeInstanceId = NO_INSTANCE;
            return SUCCESS;
        }
    }
    return TIMEOUT;
}
