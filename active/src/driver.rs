//! The CUDA driver API, as much of it as the checks use, loaded at run time from the driver's
//! own `libcuda.so.1` (no toolkit, no runtime library on the node). Every symbol is resolved
//! once, by its versioned name where cuda.h maps the plain one to a `_v2` (what a program built
//! against cuda.h links), and every call's `CUresult` becomes an error naming the call.
//!
//! The RAII types here ([`Context`], [`DeviceBuffer`], [`HostBuffer`], [`Module`], [`Stream`],
//! [`Event`]) free what they hold when dropped, on every path out: a check that fails, the time
//! limit or SIGTERM. [`LIVE`] counts what is held, so the report can say that everything was
//! freed before the child left.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};

/// Contexts, buffers, streams, events and modules held now, all GPUs together.
pub(crate) static LIVE: AtomicI64 = AtomicI64::new(0);

type CuResult = c_int;
pub(crate) type CuDevice = c_int;
pub(crate) type CuDevicePtr = u64;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;
type CuStream = *mut c_void;
type CuEvent = *mut c_void;

/// `CU_DEVICE_ATTRIBUTE_*` values the checks read (cuda.h).
pub(crate) mod attr {
    pub(crate) const MULTIPROCESSOR_COUNT: i32 = 16;
    pub(crate) const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub(crate) const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub(crate) const UNIFIED_ADDRESSING: i32 = 41;
}

/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`: the driver is older than the PTX.
pub(crate) const UNSUPPORTED_PTX_VERSION: c_int = 222;

macro_rules! api {
    ($($field:ident: $sym:literal => fn($($arg:ty),*);)*) => {
        /// The driver's entry points, resolved once.
        #[allow(non_snake_case)]
        pub(crate) struct Api {
            _lib: libloading::Library,
            $($field: unsafe extern "C" fn($($arg),*) -> CuResult,)*
        }

        impl Api {
            /// Load `libcuda.so.1` and resolve every entry point; Err names what is missing.
            fn load() -> Result<Self> {
                // SAFETY: loading the NVIDIA user-space driver runs its initialisers, as any
                // CUDA program does.
                let lib = unsafe { libloading::Library::new("libcuda.so.1") }
                    .map_err(|e| anyhow!("libcuda.so.1 cannot be loaded ({e}): is NVIDIA's driver installed?"))?;
                $(
                    // SAFETY: each symbol has this C signature in cuda.h.
                    let $field = unsafe {
                        *lib.get::<unsafe extern "C" fn($($arg),*) -> CuResult>($sym)
                            .map_err(|e| anyhow!("libcuda.so.1 has no {}: {e} (a driver older than R535?)",
                                String::from_utf8_lossy(&$sym[..$sym.len() - 1])))?
                    };
                )*
                Ok(Api { _lib: lib, $($field,)* })
            }
        }
    };
}

api! {
    init: b"cuInit\0" => fn(c_uint);
    driver_get_version: b"cuDriverGetVersion\0" => fn(*mut c_int);
    device_get_count: b"cuDeviceGetCount\0" => fn(*mut c_int);
    device_get: b"cuDeviceGet\0" => fn(*mut CuDevice, c_int);
    device_get_name: b"cuDeviceGetName\0" => fn(*mut c_char, c_int, CuDevice);
    device_get_attribute: b"cuDeviceGetAttribute\0" => fn(*mut c_int, c_int, CuDevice);
    device_get_pci_bus_id: b"cuDeviceGetPCIBusId\0" => fn(*mut c_char, c_int, CuDevice);
    device_can_access_peer: b"cuDeviceCanAccessPeer\0" => fn(*mut c_int, CuDevice, CuDevice);
    primary_ctx_retain: b"cuDevicePrimaryCtxRetain\0" => fn(*mut CuContext, CuDevice);
    primary_ctx_release: b"cuDevicePrimaryCtxRelease_v2\0" => fn(CuDevice);
    ctx_set_current: b"cuCtxSetCurrent\0" => fn(CuContext);
    ctx_enable_peer_access: b"cuCtxEnablePeerAccess\0" => fn(CuContext, c_uint);
    mem_get_info: b"cuMemGetInfo_v2\0" => fn(*mut usize, *mut usize);
    mem_alloc: b"cuMemAlloc_v2\0" => fn(*mut CuDevicePtr, usize);
    mem_free: b"cuMemFree_v2\0" => fn(CuDevicePtr);
    mem_host_alloc: b"cuMemHostAlloc\0" => fn(*mut *mut c_void, usize, c_uint);
    mem_free_host: b"cuMemFreeHost\0" => fn(*mut c_void);
    memset_d32_async: b"cuMemsetD32Async\0" => fn(CuDevicePtr, c_uint, usize, CuStream);
    memcpy_htod_async: b"cuMemcpyHtoDAsync_v2\0" => fn(CuDevicePtr, *const c_void, usize, CuStream);
    memcpy_dtoh_async: b"cuMemcpyDtoHAsync_v2\0" => fn(*mut c_void, CuDevicePtr, usize, CuStream);
    memcpy_dtod_async: b"cuMemcpyDtoDAsync_v2\0" => fn(CuDevicePtr, CuDevicePtr, usize, CuStream);
    memcpy_peer_async: b"cuMemcpyPeerAsync\0" => fn(CuDevicePtr, CuContext, CuDevicePtr, CuContext, usize, CuStream);
    stream_create: b"cuStreamCreate\0" => fn(*mut CuStream, c_uint);
    stream_destroy: b"cuStreamDestroy_v2\0" => fn(CuStream);
    stream_synchronize: b"cuStreamSynchronize\0" => fn(CuStream);
    event_create: b"cuEventCreate\0" => fn(*mut CuEvent, c_uint);
    event_destroy: b"cuEventDestroy_v2\0" => fn(CuEvent);
    event_record: b"cuEventRecord\0" => fn(CuEvent, CuStream);
    event_synchronize: b"cuEventSynchronize\0" => fn(CuEvent);
    event_elapsed_time: b"cuEventElapsedTime\0" => fn(*mut f32, CuEvent, CuEvent);
    module_load_data: b"cuModuleLoadData\0" => fn(*mut CuModule, *const c_void);
    module_unload: b"cuModuleUnload\0" => fn(CuModule);
    module_get_function: b"cuModuleGetFunction\0" => fn(*mut CuFunction, CuModule, *const c_char);
    occupancy_max_blocks: b"cuOccupancyMaxActiveBlocksPerMultiprocessor\0" => fn(*mut c_int, CuFunction, c_int, usize);
    launch_kernel: b"cuLaunchKernel\0" => fn(CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream, *mut *mut c_void, *mut *mut c_void);
    get_error_name: b"cuGetErrorName\0" => fn(CuResult, *mut *const c_char);
}

/// A failed driver call: the call, its `CUresult` and the result's name.
#[derive(Debug)]
pub(crate) struct CuError {
    pub(crate) call: &'static str,
    pub(crate) code: c_int,
    pub(crate) name: String,
}

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned {} ({})", self.call, self.code, self.name)
    }
}

impl std::error::Error for CuError {}

/// The loaded driver: the entry points, shared by every GPU's thread.
#[derive(Clone)]
pub(crate) struct Cuda {
    api: Arc<Api>,
}

// SAFETY: the driver API is thread-safe (cuda.h); Api holds function pointers and the library.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

impl Cuda {
    /// Load the driver and `cuInit(0)`; the driver's CUDA version (`12080` for 12.8).
    pub(crate) fn init() -> Result<(Self, i32)> {
        let api = Arc::new(Api::load()?);
        let cuda = Cuda { api };
        // SAFETY: cuInit takes flags, which must be 0.
        cuda.check("cuInit", unsafe { (cuda.api.init)(0) })?;
        let mut v: c_int = 0;
        // SAFETY: an out pointer to a local.
        cuda.check("cuDriverGetVersion", unsafe {
            (cuda.api.driver_get_version)(&mut v)
        })?;
        Ok((cuda, v))
    }

    fn check(&self, call: &'static str, rc: CuResult) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or fails.
        let named = unsafe { (self.api.get_error_name)(rc, &mut name) } == 0 && !name.is_null();
        let name = if named {
            // SAFETY: a NUL-terminated static string from the driver.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "unknown CUresult".to_string()
        };
        Err(CuError {
            call,
            code: rc,
            name,
        }
        .into())
    }

    pub(crate) fn device_count(&self) -> Result<i32> {
        let mut n: c_int = 0;
        // SAFETY: an out pointer to a local.
        self.check("cuDeviceGetCount", unsafe {
            (self.api.device_get_count)(&mut n)
        })?;
        Ok(n)
    }

    pub(crate) fn device(&self, ordinal: i32) -> Result<CuDevice> {
        let mut d: CuDevice = 0;
        // SAFETY: an out pointer to a local.
        self.check("cuDeviceGet", unsafe {
            (self.api.device_get)(&mut d, ordinal)
        })?;
        Ok(d)
    }

    pub(crate) fn name(&self, d: CuDevice) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer's length is passed with it.
        self.check("cuDeviceGetName", unsafe {
            (self.api.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, d)
        })?;
        // SAFETY: the driver NUL-terminates within the length given.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// The PCI bus id in NVML's form, `00000000:3B:00.0` (the driver says `0000:3B:00.0`).
    pub(crate) fn pci_bus_id(&self, d: CuDevice) -> Result<String> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: the buffer's length is passed with it.
        self.check("cuDeviceGetPCIBusId", unsafe {
            (self.api.device_get_pci_bus_id)(buf.as_mut_ptr(), buf.len() as c_int, d)
        })?;
        // SAFETY: NUL-terminated within the length given.
        let id = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(crate::nvml_bus_id(&id))
    }

    pub(crate) fn attribute(&self, d: CuDevice, attribute: i32) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: an out pointer to a local.
        self.check("cuDeviceGetAttribute", unsafe {
            (self.api.device_get_attribute)(&mut v, attribute, d)
        })?;
        Ok(v)
    }

    pub(crate) fn can_access_peer(&self, d: CuDevice, peer: CuDevice) -> Result<bool> {
        let mut v: c_int = 0;
        // SAFETY: an out pointer to a local.
        self.check("cuDeviceCanAccessPeer", unsafe {
            (self.api.device_can_access_peer)(&mut v, d, peer)
        })?;
        Ok(v != 0)
    }

    /// The device's primary context (the one the CUDA runtime uses), retained and made current
    /// on this thread. Its flags are left as they are: gpuhost sets nothing on a GPU.
    pub(crate) fn context(&self, d: CuDevice) -> Result<Context> {
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: an out pointer to a local.
        self.check("cuDevicePrimaryCtxRetain", unsafe {
            (self.api.primary_ctx_retain)(&mut ctx, d)
        })?;
        let c = Context::hold(self.clone(), d, ctx);
        c.make_current()?;
        Ok(c)
    }

    /// (free, total) bytes of device memory, in the current context.
    pub(crate) fn mem_info(&self) -> Result<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out pointers to locals.
        self.check("cuMemGetInfo", unsafe {
            (self.api.mem_get_info)(&mut free, &mut total)
        })?;
        Ok((free as u64, total as u64))
    }

    pub(crate) fn alloc(&self, bytes: u64) -> Result<DeviceBuffer> {
        let mut p: CuDevicePtr = 0;
        // SAFETY: an out pointer to a local.
        self.check("cuMemAlloc", unsafe {
            (self.api.mem_alloc)(&mut p, bytes as usize)
        })?;
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(DeviceBuffer {
            cuda: self.clone(),
            ptr: p,
            bytes,
        })
    }

    /// Page-locked host memory (what PCIe copies at full speed read and write).
    pub(crate) fn alloc_host(&self, bytes: u64) -> Result<HostBuffer> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: an out pointer to a local; flags 0.
        self.check("cuMemHostAlloc", unsafe {
            (self.api.mem_host_alloc)(&mut p, bytes as usize, 0)
        })?;
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(HostBuffer {
            cuda: self.clone(),
            ptr: p,
            bytes,
        })
    }

    pub(crate) fn stream(&self) -> Result<Stream> {
        let mut s: CuStream = std::ptr::null_mut();
        // SAFETY: an out pointer to a local; CU_STREAM_NON_BLOCKING (1).
        self.check("cuStreamCreate", unsafe {
            (self.api.stream_create)(&mut s, 1)
        })?;
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(Stream {
            cuda: self.clone(),
            raw: s,
        })
    }

    pub(crate) fn event(&self) -> Result<Event> {
        let mut e: CuEvent = std::ptr::null_mut();
        // SAFETY: an out pointer to a local; CU_EVENT_DEFAULT (timing on).
        self.check("cuEventCreate", unsafe {
            (self.api.event_create)(&mut e, 0)
        })?;
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(Event {
            cuda: self.clone(),
            raw: e,
        })
    }

    /// Load a PTX module (the driver JITs it for this GPU).
    pub(crate) fn module(&self, ptx: &str) -> Result<Module> {
        let text = CString::new(ptx).map_err(|_| anyhow!("the embedded PTX holds a NUL byte"))?;
        let mut m: CuModule = std::ptr::null_mut();
        // SAFETY: a NUL-terminated PTX text and an out pointer to a local.
        let rc = unsafe { (self.api.module_load_data)(&mut m, text.as_ptr().cast()) };
        if rc == UNSUPPORTED_PTX_VERSION {
            bail!("the driver cannot load gpuhost's PTX (ISA 7.0): CUDA_ERROR_UNSUPPORTED_PTX_VERSION; the driver is older than R535: upgrade it");
        }
        self.check("cuModuleLoadData", rc)?;
        LIVE.fetch_add(1, Ordering::SeqCst);
        Ok(Module {
            cuda: self.clone(),
            raw: m,
        })
    }

    pub(crate) fn memset_d32(&self, b: &DeviceBuffer, value: u32, s: &Stream) -> Result<()> {
        // SAFETY: the buffer is live and holds bytes/4 32-bit words.
        self.check("cuMemsetD32Async", unsafe {
            (self.api.memset_d32_async)(b.ptr, value, (b.bytes / 4) as usize, s.raw)
        })
    }

    pub(crate) fn htod(
        &self,
        dst: &DeviceBuffer,
        src: &HostBuffer,
        bytes: u64,
        s: &Stream,
    ) -> Result<()> {
        let n = bytes.min(dst.bytes).min(src.bytes) as usize;
        // SAFETY: both buffers are live and at least n bytes long.
        self.check("cuMemcpyHtoDAsync", unsafe {
            (self.api.memcpy_htod_async)(dst.ptr, src.ptr, n, s.raw)
        })
    }

    pub(crate) fn dtoh(
        &self,
        dst: &HostBuffer,
        src: &DeviceBuffer,
        bytes: u64,
        s: &Stream,
    ) -> Result<()> {
        let n = bytes.min(dst.bytes).min(src.bytes) as usize;
        // SAFETY: both buffers are live and at least n bytes long.
        self.check("cuMemcpyDtoHAsync", unsafe {
            (self.api.memcpy_dtoh_async)(dst.ptr, src.ptr, n, s.raw)
        })
    }

    pub(crate) fn dtod(
        &self,
        dst: &DeviceBuffer,
        src: &DeviceBuffer,
        bytes: u64,
        s: &Stream,
    ) -> Result<()> {
        let n = bytes.min(dst.bytes).min(src.bytes) as usize;
        // SAFETY: both buffers are live and at least n bytes long.
        self.check("cuMemcpyDtoDAsync", unsafe {
            (self.api.memcpy_dtod_async)(dst.ptr, src.ptr, n, s.raw)
        })
    }

    /// Copy between two GPUs' buffers (through NVLink or PCIe peer to peer where the GPUs can
    /// reach each other, else through host memory: the driver chooses).
    pub(crate) fn peer_copy(
        &self,
        dst: (&DeviceBuffer, &Context),
        src: (&DeviceBuffer, &Context),
        bytes: u64,
        s: &Stream,
    ) -> Result<()> {
        let n = bytes.min(dst.0.bytes).min(src.0.bytes) as usize;
        // SAFETY: both buffers are live in their contexts and at least n bytes long.
        self.check("cuMemcpyPeerAsync", unsafe {
            (self.api.memcpy_peer_async)(dst.0.ptr, dst.1.raw, src.0.ptr, src.1.raw, n, s.raw)
        })
    }

    /// Let `ctx` (current) reach `peer`'s memory directly: a property of gpuhost's own
    /// context, which ends with it, not a GPU setting. Already enabled is fine.
    pub(crate) fn enable_peer(&self, peer: &Context) -> Result<()> {
        // SAFETY: a live context; flags 0.
        let rc = unsafe { (self.api.ctx_enable_peer_access)(peer.raw, 0) };
        // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        if rc == 704 {
            return Ok(());
        }
        self.check("cuCtxEnablePeerAccess", rc)
    }

    pub(crate) fn record(&self, e: &Event, s: &Stream) -> Result<()> {
        // SAFETY: a live event and stream.
        self.check("cuEventRecord", unsafe {
            (self.api.event_record)(e.raw, s.raw)
        })
    }

    /// Milliseconds between two recorded events, once the second has happened.
    pub(crate) fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f64> {
        // SAFETY: a live event.
        self.check("cuEventSynchronize", unsafe {
            (self.api.event_synchronize)(end.raw)
        })?;
        let mut ms: f32 = 0.0;
        // SAFETY: an out pointer to a local; two live events.
        self.check("cuEventElapsedTime", unsafe {
            (self.api.event_elapsed_time)(&mut ms, start.raw, end.raw)
        })?;
        Ok(f64::from(ms))
    }

    pub(crate) fn sync(&self, s: &Stream) -> Result<()> {
        // SAFETY: a live stream.
        self.check("cuStreamSynchronize", unsafe {
            (self.api.stream_synchronize)(s.raw)
        })
    }

    pub(crate) fn function(&self, m: &Module, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| anyhow!("kernel name {name:?} holds a NUL"))?;
        let mut f: CuFunction = std::ptr::null_mut();
        // SAFETY: a live module, a NUL-terminated name, an out pointer to a local.
        self.check("cuModuleGetFunction", unsafe {
            (self.api.module_get_function)(&mut f, m.raw, cname.as_ptr())
        })?;
        Ok(Function { raw: f })
    }

    /// Blocks of `threads` threads that fit on one SM at once.
    pub(crate) fn blocks_per_sm(&self, f: &Function, threads: u32) -> Result<u32> {
        let mut n: c_int = 0;
        // SAFETY: a live function and an out pointer to a local.
        self.check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            (self.api.occupancy_max_blocks)(&mut n, f.raw, threads as c_int, 0)
        })?;
        Ok(n.max(1) as u32)
    }

    /// Launch `f` on a 1-D grid; `params` are the kernel's parameters, in order.
    pub(crate) fn launch(
        &self,
        f: &Function,
        blocks: u32,
        threads: u32,
        s: &Stream,
        params: &mut [Param],
    ) -> Result<()> {
        let mut ptrs: Vec<*mut c_void> = params.iter_mut().map(Param::as_ptr).collect();
        // SAFETY: the parameters match the kernel's signature (the callers in checks.rs and
        // each kernel's PTX are kept together); they live across the call, which copies them.
        self.check("cuLaunchKernel", unsafe {
            (self.api.launch_kernel)(
                f.raw,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                s.raw,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

/// A kernel parameter, by value.
pub(crate) enum Param {
    U64(u64),
    U32(u32),
    F32(f32),
    F64(f64),
}

impl Param {
    fn as_ptr(&mut self) -> *mut c_void {
        match self {
            Param::U64(v) => (v as *mut u64).cast(),
            Param::U32(v) => (v as *mut u32).cast(),
            Param::F32(v) => (v as *mut f32).cast(),
            Param::F64(v) => (v as *mut f64).cast(),
        }
    }
}

/// A kernel of a loaded module (lives as long as the module; the callers keep the module).
pub(crate) struct Function {
    raw: CuFunction,
}

/// A retained primary context; released on drop.
pub(crate) struct Context {
    cuda: Cuda,
    device: CuDevice,
    raw: CuContext,
}

impl Context {
    fn hold(cuda: Cuda, device: CuDevice, raw: CuContext) -> Self {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Context { cuda, device, raw }
    }

    /// Make this context current on the calling thread.
    pub(crate) fn make_current(&self) -> Result<()> {
        // SAFETY: a live context.
        self.cuda.check("cuCtxSetCurrent", unsafe {
            (self.cuda.api.ctx_set_current)(self.raw)
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained by Cuda::context, released once here.
        unsafe { (self.cuda.api.primary_ctx_release)(self.device) };
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

macro_rules! owned {
    ($name:ident, $raw:ty, $free:ident, $doc:literal) => {
        #[doc = $doc]
        pub(crate) struct $name {
            cuda: Cuda,
            raw: $raw,
        }
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created by Cuda and freed once here.
                unsafe { (self.cuda.api.$free)(self.raw) };
                LIVE.fetch_sub(1, Ordering::SeqCst);
            }
        }
    };
}

owned!(
    Module,
    CuModule,
    module_unload,
    "A loaded PTX module; unloaded on drop."
);
owned!(
    Stream,
    CuStream,
    stream_destroy,
    "A stream; destroyed on drop."
);
owned!(
    Event,
    CuEvent,
    event_destroy,
    "A timing event; destroyed on drop."
);

/// Device memory; freed on drop.
pub(crate) struct DeviceBuffer {
    cuda: Cuda,
    pub(crate) ptr: CuDevicePtr,
    pub(crate) bytes: u64,
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by Cuda::alloc and freed once here.
        unsafe { (self.cuda.api.mem_free)(self.ptr) };
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Page-locked host memory; freed on drop.
pub(crate) struct HostBuffer {
    cuda: Cuda,
    ptr: *mut c_void,
    pub(crate) bytes: u64,
}

// SAFETY: plain memory owned by this value; the driver API may free it from any thread.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    /// The buffer as bytes (after a synchronised copy into it).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `bytes` bytes of host memory owned by this value.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), self.bytes as usize) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by Cuda::alloc_host and freed once here.
        unsafe { (self.cuda.api.mem_free_host)(self.ptr) };
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

// SAFETY: driver handles may be used from any thread once their context is current there.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}
// SAFETY: as above.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Send for Function {}
