// The NVML floor: what the CSV line's calls cost a minimal C program (time, peak RSS).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
typedef int (*f0)(void);
typedef int (*fh)(unsigned, void **);
typedef int (*fs)(void *, char *, unsigned);
typedef int (*fu2)(void *, unsigned *, unsigned *);
typedef int (*fecc)(void *, int, int, unsigned long long *);
typedef int (*ft)(void *, int, unsigned *);
typedef int (*fu)(void *, unsigned *);
typedef int (*fll)(void *, unsigned long long *);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static long hwm(const char *k);
static void parts(const char *at){printf("  %s: RssAnon %ld RssFile %ld RssShmem %ld\n",at,hwm("RssAnon"),hwm("RssFile"),hwm("RssShmem"));}
static long hwm(const char *k){FILE*f=fopen("/proc/self/status","r");char l[256];long v=-1;while(fgets(l,256,f))if(!strncmp(l,k,strlen(k)))sscanf(l+strlen(k)+1,"%ld",&v);fclose(f);return v;}
int main(int argc,char**argv){
  unsigned flags=argc>1?(unsigned)atoi(argv[1]):0;
  double t0=now();
  printf("start rss %ld hwm %ld\n",hwm("VmRSS"),hwm("VmHWM"));
  void*l=dlopen("libnvidia-ml.so.1",RTLD_NOW);
  if(!l){printf("no lib\n");return 1;}
  printf("dlopen rss %ld hwm %ld %.2f ms\n",hwm("VmRSS"),hwm("VmHWM"),now()-t0);
  if(flags){typedef int(*fi)(unsigned);int rc=((fi)dlsym(l,"nvmlInitWithFlags"))(flags);printf("initWithFlags(%u) rc %d\n",flags,rc);}else ((f0)dlsym(l,"nvmlInit_v2"))();
  parts("init");printf("init rss %ld hwm %ld %.2f ms\n",hwm("VmRSS"),hwm("VmHWM"),now()-t0);
  void*d;((fh)dlsym(l,"nvmlDeviceGetHandleByIndex_v2"))(0,&d);
  printf("handle rss %ld hwm %ld %.2f ms\n",hwm("VmRSS"),hwm("VmHWM"),now()-t0);
  char n[96];((fs)dlsym(l,"nvmlDeviceGetName"))(d,n,96);
  unsigned a,b;((fu2)dlsym(l,"nvmlDeviceGetEccMode"))(d,&a,&b);
  unsigned long long e;((fecc)dlsym(l,"nvmlDeviceGetTotalEccErrors"))(d,1,0,&e);((fecc)dlsym(l,"nvmlDeviceGetTotalEccErrors"))(d,1,1,&e);
  unsigned t;((ft)dlsym(l,"nvmlDeviceGetTemperature"))(d,0,&t);
  unsigned p;((fu)dlsym(l,"nvmlDeviceGetPowerUsage"))(d,&p);
  unsigned long long r;((fll)dlsym(l,"nvmlDeviceGetCurrentClocksEventReasons"))(d,&r);
  printf("queries rss %ld hwm %ld %.2f ms (%s temp %u power %u)\n",hwm("VmRSS"),hwm("VmHWM"),now()-t0,n,t,p);
  parts("end");
  fflush(stdout);
  /* NVML_FLOOR_PAUSE_MS: stay a while before the exit, so that /proc/PID/smaps can be read
   * (bench/rss-anatomy-gpu-run.sh). */
  const char *pause=getenv("NVML_FLOOR_PAUSE_MS");
  if(pause) usleep((useconds_t)atoi(pause)*1000);
  return 0;
}
